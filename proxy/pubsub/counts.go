package pubsub

import (
	"bytes"
	"sync/atomic"

	"github.com/emqproxy/emqproxy/resp"
)

// Counts are a client's subscriptions as the server's confirmations give
// them: channels, patterns and shard channels. The relay keeps them; CLIENT
// LIST reads them from any goroutine.
type Counts struct {
	sub, psub, ssub atomic.Int32
}

// Get returns the channels, patterns and shard channels.
func (v *Counts) Get() (sub, psub, ssub int) {
	return int(v.sub.Load()), int(v.psub.Load()), int(v.ssub.Load())
}

// Any reports whether the client is subscribed to anything.
func (v *Counts) Any() bool { return v.sub.Load()+v.psub.Load()+v.ssub.Load() > 0 }

// Clear sets every count to 0 (the client left subscribe mode).
func (v *Counts) Clear() {
	v.sub.Store(0)
	v.psub.Store(0)
	v.ssub.Store(0)
}

// note keeps the subscription counts a subscribe confirmation gives
// (`*3 subscribe <channel> <count>`, or a `>3` push in RESP3): the count
// is the client's channels and patterns together (shard channels apart).
func (v *Counts) note(fr []byte, resp3 bool) {
	head := byte('*')
	if resp3 {
		head = '>'
	}
	if len(fr) < 20 || fr[0] != head || fr[1] != '3' || fr[2] != '\r' {
		return
	}
	var class byte
	var rest []byte
	for _, k := range subKinds {
		if len(fr) > 4+len(k.head) && string(fr[4:4+len(k.head)]) == k.head {
			class, rest = k.class, fr[4+len(k.head):]
			break
		}
	}
	if rest == nil {
		return
	}
	body := rest[:len(rest)-2]
	i := len(body) - 1
	for i >= 0 && body[i] != '\n' {
		i--
	}
	if i < 0 || i+1 >= len(body) || body[i+1] != ':' {
		return
	}
	n, ok := resp.ParseInt(body[i+2:])
	if !ok || n < 0 || n > 1<<31-1 {
		return
	}
	switch class {
	case 'p':
		v.psub.Store(max(int32(n)-v.sub.Load(), 0))
	case 's':
		v.ssub.Store(int32(n))
	default:
		v.sub.Store(max(int32(n)-v.psub.Load(), 0))
	}
}

// noteNested keeps the counts the subscribe confirmations among the
// elements of a transaction's reply give (note, element by element): a
// server puts the confirmation of a subscribe command queued in MULTI (a
// push in RESP3) into EXEC's array. Framed whole, so only for EXEC's reply.
func (v *Counts) noteNested(fr []byte, resp3 bool) {
	i := bytes.Index(fr, []byte("\r\n"))
	if len(fr) == 0 || fr[0] != '*' || i < 0 {
		return
	}
	for rest := fr[i+2:]; len(rest) > 0; {
		_, n, err := resp.ParsePrefix(rest)
		if err != nil {
			return
		}
		v.note(rest[:n], resp3)
		rest = rest[n:]
	}
}

// subKinds are the subscribe confirmations' first elements and which
// count they give: c channels, p patterns, s shard channels.
var subKinds = []struct {
	head  string
	class byte
}{
	{"$9\r\nsubscribe\r\n", 'c'}, {"$11\r\nunsubscribe\r\n", 'c'},
	{"$10\r\npsubscribe\r\n", 'p'}, {"$12\r\npunsubscribe\r\n", 'p'},
	{"$10\r\nssubscribe\r\n", 's'}, {"$12\r\nsunsubscribe\r\n", 's'},
}
