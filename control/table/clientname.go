package table

import "strings"

// MoverClientName is the client name of the mover's connections.
const MoverClientName = "emqproxy-mover"

// dataClientPrefix starts the name of every proxy's data connections.
const dataClientPrefix = "emqproxy-data:"

// DataClientName is the client name (CLIENT SETNAME) of the data
// connections of the proxy registered as id: every byte that is not a
// letter, a digit or one of "-_.:" is written '_' (a client name has no
// spaces).
func DataClientName(id string) string {
	b := []byte(dataClientPrefix + id)
	for i := len(dataClientPrefix); i < len(b); i++ {
		c := b[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:", c) >= 0
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
