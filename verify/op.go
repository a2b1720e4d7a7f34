package verify

import (
	"strconv"
	"strings"
)

// Op is one step of a case: a verb or read call (Token set) or a raw
// command (Raw set). Arguments are templates: "@x" is the key x of the
// side's queue (emq:{q}:x) and "^x" the key x of a second, foreign queue.
type Op struct {
	Token string   // job-core token, or a read script's name ("stats", "peek")
	Keys  []string // the call's keys (numkeys is their count)
	Vals  []string // the call's values
	Raw   []string // a raw command, applied as is on the side's queue
}

// isRead reports whether the op calls a declared read script.
func (o Op) isRead() bool { return o.Token == "stats" || o.Token == "peek" }

// expand resolves a template argument for queue q.
func expand(arg, q string) string {
	switch {
	case strings.HasPrefix(arg, "@"):
		return queueKey(q) + arg[1:]
	case strings.HasPrefix(arg, "^"):
		return queueKey(q+"o") + arg[1:]
	}
	return arg
}

func expandAll(args []string, q string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, q)
	}
	return out
}

// tail is numkeys, keys and values of the call for queue q.
func (o Op) tail(q string) []string {
	out := []string{strconv.Itoa(len(o.Keys))}
	out = append(out, expandAll(o.Keys, q)...)
	return append(out, o.Vals...)
}

// String renders the op as the native line (or the raw command), with the
// queue templates left in.
func (o Op) String() string {
	if o.Raw != nil {
		return strings.Join(o.Raw, " ")
	}
	head := "EMQ." + o.Token
	if o.isRead() {
		return o.Token + " " + strconv.Itoa(len(o.Keys)) + " " + strings.Join(append(append([]string{}, o.Keys...), o.Vals...), " ")
	}
	parts := append([]string{head, strconv.Itoa(len(o.Keys))}, o.Keys...)
	return strings.Join(append(parts, o.Vals...), " ")
}

// offsets are the amounts the op adds to "now" in the scores and replies it
// writes: the lease for CLAIM and EXTEND, 0 for COMPLETE, REAP and FAIL's
// dead branch, the backoff for FAIL's delayed branch. Nil when the op writes
// no time (or its values are malformed).
func (o Op) offsets() []int64 {
	num := func(i int) (int64, bool) {
		if i >= len(o.Vals) {
			return 0, false
		}
		n, err := strconv.ParseInt(o.Vals[i], 10, 64)
		return n, err == nil && n >= 0
	}
	switch o.Token {
	case "CLAIM":
		if n, ok := num(0); ok {
			return []int64{n}
		}
	case "EXTEND":
		if n, ok := num(1); ok {
			return []int64{n}
		}
	case "COMPLETE", "REAP":
		return []int64{0}
	case "FAIL":
		if n, ok := num(3); ok {
			return []int64{n, 0}
		}
		return []int64{0}
	}
	return nil
}

// timedReply reports whether the op's integer reply, when positive, is a
// time (EXTEND's deadline, FAIL's run-at).
func (o Op) timedReply() bool { return o.Token == "EXTEND" || o.Token == "FAIL" }

// Builders used by the case tables.

func call(tok string, keys []string, vals ...string) Op {
	return Op{Token: tok, Keys: keys, Vals: vals}
}

// verb builds a well-formed call of tok for job id (ignored when the verb
// takes no row key) with the given values.
func verb(tok, id string, vals ...string) Op {
	return Op{Token: tok, Keys: verbByToken(tok).keys(id), Vals: vals}
}

func raw(args ...string) Op { return Op{Raw: args} }

func enq(id, payload string) Op       { return verb("ENQUEUE", id, id, payload) }
func claim(lease string) Op           { return verb("CLAIM", "", lease) }
func extend(id, lease string) Op      { return verb("EXTEND", id, id, lease) }
func complete(id string) Op           { return verb("COMPLETE", id, id) }
func fail(id, e, max, back string) Op { return verb("FAIL", id, id, e, max, back) }
func retry(id string) Op              { return verb("RETRY", id, id) }
func cancel(id string) Op             { return verb("CANCEL", id, id) }
func promote(limit string) Op         { return verb("PROMOTE", "", limit) }
func reap(limit, max string) Op       { return verb("REAP", "", limit, max) }
func pause() Op                       { return verb("PAUSE", "") }
func resume() Op                      { return verb("RESUME", "") }
func remove(id string) Op             { return verb("REMOVE", id, id) }
func resched(id, at string) Op        { return verb("RESCHEDULE", id, id, at) }
func requeue(id string) Op            { return verb("REQUEUE", id, id) }

func stats() Op {
	return Op{Token: "stats", Keys: []string{"@pending", "@delayed", "@active", "@done", "@dead", "@paused"}}
}

func peek(id string) Op { return Op{Token: "peek", Keys: []string{"@job:" + id}} }

// row writes a job row directly (orphan and odd-state setups).
func row(id string, fields ...string) Op {
	return raw(append([]string{"HSET", "@job:" + id}, fields...)...)
}

// zadd puts id into set at a literal score directly.
func zadd(set, sc, id string) Op { return raw("ZADD", "@"+set, sc, id) }
