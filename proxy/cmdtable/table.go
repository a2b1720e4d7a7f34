package cmdtable

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The server's key positions (and, for the proxy's queue-time checks
// inside MULTI, its command names, arities and no-multi flags).
//
// Routing needs the keys of every forwarded command. The proxy asks each
// upstream once, on its first connection, for its command table (COMMAND)
// and keeps, per command name (and per subcommand of container commands),
// the key specs the server itself uses for COMMAND GETKEYS: where the key
// search begins (an index, or after a keyword) and how the keys are found
// from there (a range, or a count argument). The tables of every upstream
// are merged (a module node adds its EMQ.* commands), first one wins.
//
// A command whose specs the server marks unknown or incomplete (SORT's
// STORE, for example) has Ask set: the proxy asks the server, COMMAND
// GETKEYS on the default upstream, in a round trip of its own. A command the table
// does not know has no keys: it goes to the default route.

// Spec is one of a command's key specs (redis 7 "key_specs").
type Spec struct {
	bs        byte // begin search: 'i' index, 'k' keyword, 0 unknown
	index     int
	keyword   string
	startfrom int

	fk        byte // find keys: 'r' range, 'n' keynum, 0 unknown
	lastkey   int
	keystep   int
	limit     int
	keynumidx int
	firstkey  int

	// Write: the spec's keys may be written (flags RW, OW or RM, or not
	// RO); NotKey: they are not keys (SPUBLISH's shard channel). Read by
	// the shared-connection rule's protected-key check.
	Write, NotKey bool
}

// Entry is what the table knows of one command. It is never modified once
// its table is merged into a Store.
type Entry struct {
	Specs []Spec
	// Ask: a spec is unknown or incomplete; COMMAND GETKEYS answers.
	Ask  bool
	Subs map[string]*Entry // lower-case subcommand (container commands)

	// What the server checks before it queues a command inside MULTI: the
	// name as COMMAND gives it (the server's fullname, "container|sub" for
	// a subcommand), the arity (negative: at least that many arguments,
	// the name included) and the no-multi flag.
	Name    string
	Arity   int
	NoMulti bool

	// What the shared-connection rule reads: the flags and ACL categories
	// it looks at, the class they put the command in (class.go), and the
	// command's label in refusals and policy.allow ("CONFIG GET"; Parent
	// is "CONFIG" for a subcommand, "" otherwise).
	Traits Traits
	Class  Class
	Label  string
	Parent string
}

// Table maps lower-case command names to their entries.
type Table map[string]*Entry

// Store is the merged table of every upstream, replaced (never modified)
// on each Merge, with its index (stored first: whoever finds the index
// finds the table). Its zero value is an empty store, no table loaded; it
// must not be copied once used.
type Store struct {
	mu  sync.Mutex
	tab atomic.Pointer[Table]
	idx atomic.Pointer[Index]
	// setInfo: the table has CLIENT SETINFO (rewrite.State.SetInfo).
	setInfo atomic.Bool
}

// Merge adds the commands of t that the store does not have yet.
func (ks *Store) Merge(t Table) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	next := Table{}
	if cur := ks.tab.Load(); cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	for k, v := range t {
		if _, ok := next[k]; !ok {
			next[k] = v
		}
	}
	client := next["client"]
	ks.setInfo.Store(client != nil && client.Subs["setinfo"] != nil)
	ks.idx.Store(newIndex(next))
	ks.tab.Store(&next)
}

// Lookup returns the entry of the command args names (its subcommand's for
// a container command), or nil.
func (ks *Store) Lookup(args [][]byte) *Entry {
	x := ks.idx.Load()
	if x == nil {
		return nil
	}
	return x.Lookup(args)
}

// Index returns the index of the table, nil before a table is loaded.
func (ks *Store) Index() *Index { return ks.idx.Load() }

// Table returns the merged table, nil before one is loaded. It must not be
// modified.
func (ks *Store) Table() Table {
	if t := ks.tab.Load(); t != nil {
		return *t
	}
	return nil
}

// SetInfo reports whether the table has CLIENT SETINFO
// (rewrite.State.SetInfo).
func (ks *Store) SetInfo() bool { return ks.setInfo.Load() }

// Index is a table's top-level names as an open-addressed hash table
// on the FNV-1a hash of the lower-case name, computed while lower-casing:
// every forwarded command is looked up (the shared-connection rule), and Go's map,
// hashing the name a second time, cost as much again (rewrite/table.go
// does the same for its own table). At most half full.
type Index struct {
	slots []slot
	mask  uint32
}

type slot struct {
	name string
	ck   *Entry
}

// The FNV-1a parameters.
const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

// newIndex indexes t.
func newIndex(t Table) *Index {
	size := 64
	for size < 2*len(t) {
		size *= 2
	}
	x := &Index{slots: make([]slot, size), mask: uint32(size - 1)}
	for name, ck := range t {
		var h uint32 = fnvOffset
		for i := range len(name) {
			h = (h ^ uint32(name[i])) * fnvPrime
		}
		for i := h; ; i++ {
			if e := &x.slots[i&x.mask]; e.name == "" {
				*e = slot{name, ck}
				break
			}
		}
	}
	return x
}

// Lookup is Store.Lookup on one index.
func (x *Index) Lookup(args [][]byte) *Entry {
	if len(args) == 0 || len(args[0]) > MaxName {
		return nil
	}
	var buf [MaxName]byte
	low := buf[:len(args[0])]
	var h uint32 = fnvOffset
	for i, c := range args[0] {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
		h = (h ^ uint32(c)) * fnvPrime
	}
	var c *Entry
	for i := h; ; i++ {
		e := &x.slots[i&x.mask]
		if e.name == "" {
			return nil
		}
		if e.name == string(low) {
			c = e.ck
			break
		}
	}
	if c.Subs == nil || len(args) < 2 || len(args[1]) > MaxName {
		return c
	}
	if sc := c.Subs[string(rewrite.LowerInto(buf[:0], args[1]))]; sc != nil {
		return sc
	}
	return c
}

// MaxName bounds command names looked up (longer ones are unknown).
const MaxName = 64

// Positions appends to dst the indices in args of the command's keys, as
// COMMAND GETKEYS finds them from the specs. Out-of-range positions (a
// malformed command the server will refuse) are skipped.
func (c *Entry) Positions(args [][]byte, dst []int) []int {
	for i := range c.Specs {
		dst = c.Specs[i].Positions(args, dst)
	}
	return dst
}

// Positions appends to dst the indices in args of one spec's keys.
func (sp *Spec) Positions(args [][]byte, dst []int) []int {
	argc := len(args)
	first := 0
	switch sp.bs {
	case 'i':
		first = sp.index
	case 'k':
		first = keywordStart(args, sp.keyword, sp.startfrom)
	}
	if first <= 0 || first >= argc {
		return dst
	}
	var last, step int
	switch sp.fk {
	case 'r':
		switch {
		case sp.lastkey >= 0:
			last = first + sp.lastkey
		case sp.limit == 0:
			last = argc + sp.lastkey
		default:
			last = first + ((argc-first)/sp.limit + sp.lastkey)
		}
		step = sp.keystep
	case 'n':
		at := first + sp.keynumidx
		if at >= argc {
			return dst
		}
		n, ok := resp.ParseInt(args[at])
		if !ok || n < 0 || n > int64(argc) {
			return dst
		}
		first += sp.firstkey
		last = first + int(n) - 1
		step = sp.keystep
	default:
		return dst
	}
	if step <= 0 {
		step = 1
	}
	for i := first; i <= last && i < argc; i += step {
		if i >= 1 {
			dst = append(dst, i)
		}
	}
	return dst
}

// keywordStart finds the argument after keyword the way the server's
// keyword begin search does (from startfrom, forwards when positive,
// backwards from the end when negative), or 0.
func keywordStart(args [][]byte, keyword string, startfrom int) int {
	argc := len(args)
	start, end, step := startfrom, argc-1, 1
	if startfrom < 0 {
		start, end, step = argc+startfrom, 1, -1
	}
	for i := start; i != end; i += step {
		if i >= argc || i < 1 {
			break
		}
		if strings.EqualFold(string(args[i]), keyword) {
			return i + 1
		}
	}
	return 0
}

// Load reads an upstream's COMMAND reply into a table. Its error (the
// connection's, wrapped, or the server's refusal) reads "COMMAND: ...";
// the caller says what failed.
func Load(ctx context.Context, c fence.Conn) (Table, error) {
	r, err := c.Do(ctx, "COMMAND")
	if err != nil {
		return nil, fmt.Errorf("COMMAND: %w", err)
	}
	if r.IsError() || r.Type != '*' {
		return nil, fmt.Errorf("COMMAND: %s (the proxy needs the command table to route by key)", resp.OneLine(r.Str))
	}
	t := Table{}
	for _, e := range r.Elems {
		name, ck := parseCommandEntry(e)
		if name != "" {
			t[name] = ck
		}
	}
	return t, nil
}

// parseCommandEntry reads one COMMAND entry: name, arity, flags, first,
// last, step, ACL categories, tips, key specs, subcommands.
func parseCommandEntry(e fence.Reply) (string, *Entry) {
	if len(e.Elems) < 6 {
		return "", nil
	}
	name := strings.ToLower(e.Elems[0].Str)
	ck := &Entry{
		Name:  e.Elems[0].Str,
		Arity: int(e.Elems[1].Int),
		// Redis 7 and Valkey spell it no_multi; accept the no-multi of
		// the command JSON files too.
		NoMulti: hasFlag(e.Elems[2], "no_multi") || hasFlag(e.Elems[2], "no-multi"),
		Label:   label(e.Elems[0].Str),
	}
	var cats fence.Reply
	if len(e.Elems) > 6 {
		cats = e.Elems[6]
	}
	ck.Traits = parseTraits(e.Elems[2], cats)
	if parent, _, ok := strings.Cut(e.Elems[0].Str, "|"); ok {
		ck.Parent = label(parent)
	}
	if len(e.Elems) > 8 {
		for _, s := range e.Elems[8].Elems {
			sp, ok := parseKeySpec(s)
			if !ok {
				ck.Ask = true
				continue
			}
			ck.Specs = append(ck.Specs, sp)
		}
	} else if first := int(e.Elems[3].Int); first > 0 {
		// A server without key specs: the legacy first, last, step.
		ck.Specs = []Spec{{bs: 'i', index: first, fk: 'r', lastkey: int(e.Elems[4].Int) - first, keystep: int(e.Elems[5].Int),
			Write: ck.Traits&TraitWrite != 0}}
		if e.Elems[4].Int < 0 {
			ck.Specs[0].lastkey = int(e.Elems[4].Int)
		}
		ck.Ask = hasFlag(e.Elems[2], "movablekeys")
	}
	if len(e.Elems) > 9 && len(e.Elems[9].Elems) > 0 {
		ck.Subs = map[string]*Entry{}
		for _, sub := range e.Elems[9].Elems {
			sname, sck := parseCommandEntry(sub)
			if _, after, ok := strings.Cut(sname, "|"); ok {
				ck.Subs[after] = sck
			}
		}
	}
	ck.Class = classify(name, ck.Traits)
	return name, ck
}

// hasFlag reports whether a flags array holds flag.
func hasFlag(flags fence.Reply, flag string) bool {
	for _, f := range flags.Elems {
		if strings.EqualFold(f.Str, flag) {
			return true
		}
	}
	return false
}

// parseKeySpec reads one key spec (a flat map). ok is false for a spec
// the proxy must ask the server about: unknown or incomplete.
func parseKeySpec(r fence.Reply) (Spec, bool) {
	var sp Spec
	m := flatMap(r)
	if hasFlag(m["flags"], "incomplete") {
		return sp, false
	}
	kf := m["flags"]
	sp.NotKey = hasFlag(kf, "not_key")
	sp.Write = hasFlag(kf, "RW") || hasFlag(kf, "OW") || hasFlag(kf, "RM") || !hasFlag(kf, "RO") || hasFlag(kf, "variable_flags")
	bs, fk := flatMap(m["begin_search"]), flatMap(m["find_keys"])
	bspec, fspec := flatMap(bs["spec"]), flatMap(fk["spec"])
	switch bs["type"].Str {
	case "index":
		sp.bs, sp.index = 'i', int(bspec["index"].Int)
	case "keyword":
		sp.bs, sp.keyword, sp.startfrom = 'k', bspec["keyword"].Str, int(bspec["startfrom"].Int)
	default:
		return sp, false
	}
	switch fk["type"].Str {
	case "range":
		sp.fk = 'r'
		sp.lastkey, sp.keystep, sp.limit = int(fspec["lastkey"].Int), int(fspec["keystep"].Int), int(fspec["limit"].Int)
	case "keynum":
		sp.fk = 'n'
		sp.keynumidx, sp.firstkey, sp.keystep = int(fspec["keynumidx"].Int), int(fspec["firstkey"].Int), int(fspec["keystep"].Int)
	default:
		return sp, false
	}
	return sp, true
}

// flatMap reads a RESP2 flattened map (key, value, key, value ...).
func flatMap(r fence.Reply) map[string]fence.Reply {
	m := make(map[string]fence.Reply, len(r.Elems)/2)
	for i := 0; i+1 < len(r.Elems); i += 2 {
		m[r.Elems[i].Str] = r.Elems[i+1]
	}
	return m
}
