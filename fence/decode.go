package fence

import (
	"strconv"

	"github.com/emqproxy/emqproxy/resp"
)

// Decode decodes the one complete reply at the start of b (as resp.Reader
// frames it) into a Reply and returns the bytes after it. It serves the
// synchronous setup path of an upstream connection (boot commands and the
// fence on connect), never the data path. A null keeps its RESP type byte
// ('$', '*' or '_') with Null set; a map's and an attribute's Elems are
// their keys and values in turn (an attribute's then the reply it
// annotates), and an error wraps resp.ErrProtocol.
func Decode(b []byte) (Reply, []byte, error) {
	v, n, err := resp.ParsePrefix(b)
	if err != nil {
		return Reply{}, nil, err
	}
	return fromValue(&v), b[n:], nil
}

// fromValue converts one parsed reply.
func fromValue(v *resp.Value) Reply {
	r := Reply{Type: v.Type, Null: v.Nil, Str: string(v.Str), Int: v.Int}
	if v.Type == ':' {
		r.Str = strconv.FormatInt(v.Int, 10) // the line as sent: resp.ParseInt takes only that form
	}
	if len(v.Elems) > 0 {
		r.Elems = make([]Reply, len(v.Elems))
		for i := range v.Elems {
			r.Elems[i] = fromValue(&v.Elems[i])
		}
	}
	return r
}
