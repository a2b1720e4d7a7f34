package upstream

import (
	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/proxy/pipe"
	"github.com/emqproxy/emqproxy/resp"
)

// GetKeys asks the upstream for a command's keys (COMMAND GETKEYS) on the
// shared connection of client id, in a round trip of its own: for the few
// commands whose key positions the server's specs leave open. Any failure
// means no keys (nil).
func (u *Upstream) GetKeys(id uint64, args [][]byte) [][]byte {
	p := u.Shared(id, 2) // the keys are decoded from a RESP2 array
	if p == nil {
		return nil
	}
	b := pipe.NewBatch()
	b.Out = resp.AppendArray(b.Out, len(args)+2)
	b.Out = resp.AppendBulkString(b.Out, "COMMAND")
	b.Out = resp.AppendBulkString(b.Out, "GETKEYS")
	for _, a := range args {
		b.Out = resp.AppendBulk(b.Out, a)
	}
	b.N, b.Max = 1, 1<<20
	if err := p.Send(b); err != nil {
		return nil
	}
	p.Await(b)
	rep, _, err := fence.Decode(b.Reply(0))
	if err != nil || rep.Type != '*' {
		return nil
	}
	keys := make([][]byte, len(rep.Elems))
	for i, e := range rep.Elems {
		keys[i] = []byte(e.Str)
	}
	return keys
}
