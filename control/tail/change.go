package tail

import (
	"bytes"
	"strconv"
)

// maxMembers bounds the members one key's change records: past it the key
// counts as changed whole (read again in full), so a burst of writes never
// grows the mover's memory without bound (about 20 MiB a key at the
// bound).
const maxMembers = 1 << 18

// Change is what the tracker knows of one key's writes since the last
// take. With keyspace notifications every change is whole: they name the
// key, not the member. From the replication stream, the writes that name
// their members (ZADD, ZREM, ZINCRBY, HSET, HDEL, SADD, SREM, ...) record
// them, and ZPOPMIN/ZPOPMAX, which remove the lowest or highest elements
// without naming them, count them; the key's TTL commands record no
// member. Anything else (DEL, RENAME, ZREMRANGEBYSCORE, a store, ...)
// makes the change whole.
type Change struct {
	Whole   bool                // the value may differ anywhere: read it whole
	Members map[string]struct{} // members or fields named by the writes
	Head    int64               // elements popped from the low end (ZPOPMIN)
	Tail    int64               // elements popped from the high end (ZPOPMAX)
}

// WholeChange is the change of a key that must be read whole.
func WholeChange() *Change { return &Change{Whole: true} }

// setWhole makes the change whole (and forgets its members).
func (c *Change) setWhole() { c.Whole, c.Members, c.Head, c.Tail = true, nil, 0, 0 }

// add records members named by a write.
func (c *Change) add(ms ...[]byte) {
	if c.Whole {
		return
	}
	if c.Members == nil {
		c.Members = make(map[string]struct{}, len(ms))
	}
	for _, m := range ms {
		c.Members[string(m)] = struct{}{}
	}
	if len(c.Members) > maxMembers {
		c.setWhole()
	}
}

// Merge adds o to c.
func (c *Change) Merge(o *Change) {
	switch {
	case c.Whole:
	case o.Whole:
		c.setWhole()
	default:
		for m := range o.Members {
			c.add([]byte(m))
		}
		c.Head += o.Head
		c.Tail += o.Tail
	}
}

// MemberList is the change's members.
func (c *Change) MemberList() []string {
	out := make([]string, 0, len(c.Members))
	for m := range c.Members {
		out = append(out, m)
	}
	return out
}

// streamEffect is what one command of a node's replication stream does to
// the keys under prefix in the tracked database: the keys it changes
// (each with its change), or that the tracking is lost (lost names why).
// db is the database the command applies to, ours the tracked one.
//
// A stream command from a script or a module is already one of its
// effects (Redis 7 and Valkey replicate a script's writes, and the
// job-core module writes with RedisModule_Call "!"), so the commands are
// the server's plain write commands. A command not known here changes,
// whole, every argument that names a key under prefix: more is read again
// than needed, nothing is missed.
func streamEffect(db, ours int, argv [][]byte, prefix []byte, record func(key []byte, fn func(*Change))) (lost string) {
	if len(argv) == 0 {
		return ""
	}
	name := argv[0]
	is := func(s string) bool { return bytes.EqualFold(name, []byte(s)) }
	switch {
	case is("FLUSHALL"):
		return "FLUSHALL on the source"
	case is("FLUSHDB"):
		if db == ours {
			return "FLUSHDB on the source"
		}
		return ""
	case is("SWAPDB"):
		if len(argv) == 3 && (atoiIs(argv[1], ours) || atoiIs(argv[2], ours)) {
			return "SWAPDB of the tracked database on the source"
		}
		return ""
	}
	whole := func(args [][]byte) {
		for _, a := range args {
			if bytes.HasPrefix(a, prefix) {
				record(a, (*Change).setWhole)
			}
		}
	}
	if db != ours {
		// MOVE and COPY ... DB write into another database.
		if is("MOVE") || is("COPY") {
			whole(argv[1:])
		}
		return ""
	}
	if len(argv) < 2 || !bytes.HasPrefix(argv[1], prefix) {
		whole(argv[1:])
		return ""
	}
	key, args := argv[1], argv[2:]
	members := func(ms ...[]byte) { record(key, func(c *Change) { c.add(ms...) }) }
	switch {
	case is("ZADD"):
		i := 0
		for i < len(args) && isZaddFlag(args[i]) {
			i++
		}
		pairs := args[i:]
		if len(pairs) == 0 || len(pairs)%2 != 0 {
			record(key, (*Change).setWhole)
			return ""
		}
		var ms [][]byte
		for j := 1; j < len(pairs); j += 2 {
			ms = append(ms, pairs[j])
		}
		members(ms...)
	case is("ZREM"), is("SADD"), is("SREM"), is("HDEL"):
		members(args...)
	case is("ZINCRBY"), is("HINCRBY"), is("HINCRBYFLOAT"):
		if len(args) != 2 {
			record(key, (*Change).setWhole)
			return ""
		}
		if is("ZINCRBY") {
			members(args[1])
		} else {
			members(args[0])
		}
	case is("HSET"), is("HMSET"), is("HSETNX"):
		if len(args) == 0 || len(args)%2 != 0 {
			record(key, (*Change).setWhole)
			return ""
		}
		var fs [][]byte
		for j := 0; j < len(args); j += 2 {
			fs = append(fs, args[j])
		}
		members(fs...)
	case is("SMOVE"):
		if len(args) != 2 {
			whole(argv[1:])
			return ""
		}
		members(args[1])
		if bytes.HasPrefix(args[0], prefix) {
			record(args[0], func(c *Change) { c.add(args[1]) })
		}
	case is("ZPOPMIN"), is("ZPOPMAX"):
		n := int64(1)
		if len(args) == 1 {
			v, err := strconv.ParseInt(string(args[0]), 10, 64)
			if err != nil || v < 0 {
				record(key, (*Change).setWhole)
				return ""
			}
			n = v
		} else if len(args) > 1 {
			record(key, (*Change).setWhole)
			return ""
		}
		low := is("ZPOPMIN")
		record(key, func(c *Change) {
			if c.Whole {
				return
			}
			if low {
				c.Head += n
			} else {
				c.Tail += n
			}
		})
	case is("EXPIRE"), is("PEXPIRE"), is("EXPIREAT"), is("PEXPIREAT"), is("PERSIST"):
		record(key, func(*Change) {}) // changed, no member: the TTL is synced with the key
	default:
		whole(argv[1:])
	}
	return ""
}

// isZaddFlag reports whether a is one of ZADD's options.
func isZaddFlag(a []byte) bool {
	for _, f := range []string{"NX", "XX", "GT", "LT", "CH", "INCR"} {
		if bytes.EqualFold(a, []byte(f)) {
			return true
		}
	}
	return false
}

// atoiIs reports whether a is the decimal integer n.
func atoiIs(a []byte, n int) bool {
	v, err := strconv.Atoi(string(a))
	return err == nil && v == n
}
