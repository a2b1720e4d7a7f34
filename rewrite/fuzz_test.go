package rewrite

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
)

// Fuzz state bits: which session state and policy a fuzz input runs under.
const (
	fzMulti uint8 = 1 << iota
	fzWire6
	fzFenced
	fzAuthed
	fzReadonly
	fzUsers
	fzAborted
)

// fuzzSeeds are commands (arguments separated by '\n') the fuzzer starts from.
var fuzzSeeds = []string{
	"GET\nk",
	"EVALSHA\n" + shaEnqueue + "\n2\nemq:{q}:job:1\nemq:{q}:pending\n1\np",
	"evalsha\n" + shaClaim + "\n2\na\nb\n1000",
	"EVALSHA\n" + shaClaim + "\n1\na\nb",
	"EVALSHA\n" + shaUnknown + "\n0",
	"EVALSHA_RO\n" + shaStats + "\n0",
	"EVAL\nreturn 1\n-1",
	"SCRIPT\nEXISTS\n" + shaEnqueue + "\n" + shaUnknown,
	"SCRIPT\nLOAD\nreturn 1",
	"SET\n{emq}:version\nx\nNX\nGET",
	"MSET\na\n1\n{emq}:version\n2",
	"HELLO\n2\nAUTH\ndefault\npw\nSETNAME\nn",
	"CLIENT\nSETNAME\na b",
	"CONFIG\nSET\nx\ny",
	"MULTI",
	"EXEC\nx",
	"XREAD\nBLOCK\n0\nSTREAMS\ns\n$",
	"AUTH\nalice\nsecret",
	"CLIENT\nREPLY\nOFF",
	"CLIENT\nLIST\nID\n1\n-2",
	"CLIENT\nLIST\nTYPE\npubsub",
	"UNSUBSCRIBE\na\nb",
	"EVALSHA\n" + shaStats + "\n0",
}

func FuzzDecide(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(i*37))
	}
	m := testMap(f)
	f.Fuzz(func(t *testing.T, raw []byte, bits uint8) {
		args := bytes.Split(raw, []byte("\n"))
		orig := make([][]byte, len(args))
		for i, a := range args {
			orig[i] = bytes.Clone(a)
		}
		st := State{
			InMulti: bits&fzMulti != 0, Wire6: bits&fzWire6 != 0, Fenced: bits&fzFenced != 0,
			Authenticated: bits&fzAuthed != 0, MultiAborted: bits&(fzMulti|fzAborted) == fzMulti|fzAborted,
		}
		p := &Policy{Map: m}
		if bits&fzReadonly != 0 {
			p.Unknown = ReadonlyUnknown
		}
		if bits&fzUsers != 0 {
			p.Users = users
		}
		d := Decide(args, &st, p)
		for i := range args {
			if !bytes.Equal(args[i], orig[i]) {
				t.Fatalf("args[%d] modified", i)
			}
		}
		checkDecision(t, args, d, p)
	})
}

// checkDecision asserts the invariants every decision keeps.
func checkDecision(t *testing.T, args [][]byte, d Decision, p *Policy) {
	t.Helper()
	switch d.Action {
	case Pass:
		if d.Reply != nil || d.Head != "" {
			t.Fatalf("pass with a reply or head: %+v", d)
		}
	case Refuse:
		checkRefusal(t, d.Reply)
	case Local:
		if (d.Effect == ReplyOff || d.Effect == ReplySkip) && len(d.Reply) == 0 {
			break // CLIENT REPLY OFF and SKIP answer nothing
		}
		if len(d.Reply) < 3 || !bytes.HasSuffix(d.Reply, []byte("\r\n")) {
			t.Fatalf("local reply %q is not RESP", d.Reply)
		}
	case Rewrite:
		checkRewrite(t, args, d, p)
	default:
		t.Fatalf("unknown action %v", d.Action)
	}
	isEvalSha := len(args) > 0 && EqualFold(args[0], "EVALSHA")
	if isEvalSha && len(args) > 1 && p.Unknown == RefuseUnknown && d.Action != Refuse {
		if s, ok := p.Map.Lookup(args[1]); !ok || s.Read && d.Action != Rewrite {
			t.Fatalf("EVALSHA of unpinned sha %q got %v", args[1], d.Action)
		}
	}
}

// checkRefusal asserts a refusal is one RESP error starting with an
// upper-case code word.
func checkRefusal(t *testing.T, r []byte) {
	t.Helper()
	if len(r) < 4 || r[0] != '-' || !bytes.HasSuffix(r, []byte("\r\n")) ||
		bytes.ContainsAny(r[:len(r)-2], "\r\n") {
		t.Fatalf("refusal %q is not one RESP error line", r)
	}
	word, _, _ := bytes.Cut(r[1:], []byte(" "))
	for _, c := range word {
		if c < 'A' || c > 'Z' {
			t.Fatalf("refusal %q does not start with an upper-case code word", r)
		}
	}
}

// checkRewrite asserts a rewrite is a pinned verb with its shape (or an
// unknown script sent read-only), and that AppendRewritten reparses to Head
// and the client's tail.
func checkRewrite(t *testing.T, args [][]byte, d Decision, p *Policy) {
	t.Helper()
	switch {
	case d.Replace == 2 && d.Script != nil && d.Script.Verb != "":
		s := d.Script
		if d.Head != s.Command {
			t.Fatalf("head %q for script %s", d.Head, s.Name)
		}
		n, ok := resp.ParseInt(args[2])
		if !ok || n != int64(s.Keys) || len(args)-3-int(n) != s.Values {
			t.Fatalf("rewrite of %s with shape numkeys=%q args=%d", s.Name, args[2], len(args))
		}
	case d.Replace == 1 && (p.Unknown == ReadonlyUnknown && d.Script == nil || d.Script != nil && d.Script.Read) &&
		(d.Head == "EVALSHA_RO" || d.Head == "EVAL_RO"):
	default:
		t.Fatalf("unexpected rewrite %+v", d)
	}
	enc := AppendRewritten(nil, args, d)
	got, err := parseCommand(enc)
	if err != nil {
		t.Fatalf("AppendRewritten output %q: %v", enc, err)
	}
	if len(got) != 1+len(args)-d.Replace || string(got[0]) != d.Head {
		t.Fatalf("rewritten %q, want head %q and %d tail args", got, d.Head, len(args)-d.Replace)
	}
	for i, a := range args[d.Replace:] {
		if !bytes.Equal(got[1+i], a) {
			t.Fatalf("tail arg %d = %q, want %q", i, got[1+i], a)
		}
	}
}

// parseCommand parses one RESP array of bulk strings that fills b exactly.
func parseCommand(b []byte) ([][]byte, error) {
	line := func() ([]byte, error) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return nil, strconv.ErrSyntax
		}
		l := b[:i]
		b = b[i+2:]
		return l, nil
	}
	h, err := line()
	if err != nil || len(h) < 2 || h[0] != '*' {
		return nil, strconv.ErrSyntax
	}
	n, err := strconv.Atoi(string(h[1:]))
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, n)
	for range n {
		h, err := line()
		if err != nil || len(h) < 2 || h[0] != '$' {
			return nil, strconv.ErrSyntax
		}
		l, err := strconv.Atoi(string(h[1:]))
		if err != nil || l < 0 || len(b) < l+2 || string(b[l:l+2]) != "\r\n" {
			return nil, strconv.ErrSyntax
		}
		out = append(out, b[:l])
		b = b[l+2:]
	}
	if len(b) != 0 {
		return nil, strconv.ErrSyntax
	}
	return out, nil
}
