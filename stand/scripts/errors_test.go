package scripts

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// goodValues are well-formed values for each script, for job id "J1".
var goodValues = map[string][]string{
	"enqueue": {"J1", "payload"}, "claim2": {"30000"}, "extend": {"J1", "30000"},
	"complete": {"J1"}, "fail": {"J1", "boom", "3", "1000"}, "retry": {"J1"},
	"cancel": {"J1"}, "promote": {"10"}, "reap": {"10", "3"}, "pause": {},
	"resume": {}, "remove": {"J1"}, "stats": {}, "peek": {},
}

// intValues names, per script, the 1-based positions of integer values and
// whether each is a limit (at least 1).
var intValues = map[string][]struct {
	j     int
	limit bool
}{
	"claim2":  {{1, false}},
	"extend":  {{2, false}},
	"fail":    {{3, false}, {4, false}},
	"promote": {{1, true}},
	"reap":    {{1, true}, {2, false}},
}

// rowKey is the 1-based position of the P job:<id> key of the scripts that
// take it together with the id.
var rowKey = map[string]int{
	"enqueue": 1, "extend": 2, "complete": 2, "fail": 2, "retry": 2, "cancel": 3, "remove": 1,
}

func head(s Shape) string {
	if s.Read {
		return "EMQWIRE " + s.Name
	}
	return "EMQWIRE EMQ." + s.Verb
}

// refuses runs a malformed call and checks the error text and that nothing
// of the queue was written.
func (w *wire) refuses(s Shape, q queue, keys, values []string, want string) {
	w.t.Helper()
	got := w.errorText(w.call(s.Name, keys, values...))
	if got != want {
		w.t.Fatalf("%s keys %q values %q:\n got %q\nwant %q", s.Name, keys, values, got, want)
	}
	if left := w.do("KEYS", "emq:{"+string(q)+"}*").([]any); len(left) != 0 {
		w.t.Fatalf("%s wrote %v although it refused", s.Name, left)
	}
}

func TestShapeErrors(t *testing.T) { node.EachServer(t, testShapeErrors) }

func testShapeErrors(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("shape")
	for _, s := range Shapes {
		t.Run(s.Name, func(t *testing.T) {
			w := w.on(t)
			keys, values := q.keys(s.Name, "J1"), goodValues[s.Name]
			more := append(slices.Clone(keys), q.key("extra"))
			w.refuses(s, q, more, values, fmt.Sprintf("%s wants %d keys, got %d", head(s), s.Keys, s.Keys+1))
			w.refuses(s, q, keys[:len(keys)-1], values, fmt.Sprintf("%s wants %d keys, got %d", head(s), s.Keys, s.Keys-1))
			// Keys are counted before values.
			w.refuses(s, q, more, append(slices.Clone(values), "x"), fmt.Sprintf("%s wants %d keys, got %d", head(s), s.Keys, s.Keys+1))
			w.refuses(s, q, keys, append(slices.Clone(values), "x"), fmt.Sprintf("%s wants %d values, got %d", head(s), s.Values, s.Values+1))
			if s.Values > 0 {
				w.refuses(s, q, keys, values[:len(values)-1], fmt.Sprintf("%s wants %d values, got %d", head(s), s.Values, s.Values-1))
			}
		})
	}
}

func TestValueErrors(t *testing.T) { node.EachServer(t, testValueErrors) }

func testValueErrors(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("value")
	bad := []string{"", "1.5", "1e3", " 1", "1 ", "+1", "-1", "0x10", "9007199254740992", "0009007199254740992", "99999999999999999999", "one"}
	for _, s := range Shapes {
		for _, iv := range intValues[s.Name] {
			t.Run(fmt.Sprintf("%s/value%d", s.Name, iv.j), func(t *testing.T) {
				w := w.on(t)
				cases := bad
				if iv.limit {
					cases = append(slices.Clone(bad), "0")
				}
				for _, v := range cases {
					values := slices.Clone(goodValues[s.Name])
					values[iv.j-1] = v
					w.refuses(s, q, q.keys(s.Name, "J1"), values,
						fmt.Sprintf("%s value %d must be an integer", head(s), iv.j))
				}
				// The largest accepted value, leading zeros, and 0 where it
				// is not a limit.
				for _, v := range []string{"9007199254740991", "0000000000000000000009007199254740991", "01", "0"} {
					if v == "0" && iv.limit {
						continue
					}
					values := slices.Clone(goodValues[s.Name])
					values[iv.j-1] = v
					if got := w.call(s.Name, q.keys(s.Name, "J1"), values...); isError(got) {
						t.Fatalf("%s value %d = %s refused: %v", s.Name, iv.j, v, got)
					}
				}
				w.do("DEL", q.key("active"), q.key("dead"), q.key("pending"), q.key("delayed"))
			})
		}
	}
	// Values are checked in argument order (value 3 before value 4), after
	// their count.
	fail := Shapes[slices.IndexFunc(Shapes, func(s Shape) bool { return s.Name == "fail" })]
	w.refuses(fail, q, q.keys("fail", "J1"), []string{"J1", "e", "x", "y"}, "EMQWIRE EMQ.FAIL value 3 must be an integer")
	w.refuses(fail, q, q.keys("fail", "J1"), []string{"J1", "e", "x"}, "EMQWIRE EMQ.FAIL wants 4 values, got 3")
}

func isError(v any) bool { _, ok := v.(replyError); return ok }

func TestRowKeyErrors(t *testing.T) { node.EachServer(t, testRowKeyErrors) }

func testRowKeyErrors(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("rowkey")
	for _, s := range Shapes {
		i, ok := rowKey[s.Name]
		if !ok {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			w := w.on(t)
			want := fmt.Sprintf("%s key %d must be job:<id>", head(s), i)
			for _, row := range []string{
				q.job("J2"),              // another id
				queue("other").job("J1"), // another queue
				q.key("J1"),              // no job: part
				q.job("J1") + ":x",       // trailing text
				strings.ToUpper(q.job("J1")[:4]) + q.job("J1")[4:], // another prefix
			} {
				keys := q.keys(s.Name, "J1")
				keys[i-1] = row
				w.refuses(s, q, keys, goodValues[s.Name], want)
			}
			// Values are checked before the row key.
			if ivs := intValues[s.Name]; len(ivs) > 0 {
				keys := q.keys(s.Name, "J1")
				keys[i-1] = q.job("J2")
				values := slices.Clone(goodValues[s.Name])
				values[ivs[0].j-1] = "x"
				w.refuses(s, q, keys, values, fmt.Sprintf("%s value %d must be an integer", head(s), ivs[0].j))
			}
		})
	}
}

// TestIDsWithColons checks that an id or a queue name holding ':' still
// derives its row key correctly.
func TestIDsWithColons(t *testing.T) { node.EachServer(t, testIDsWithColons) }

func testIDsWithColons(t *testing.T, srv node.Server) {
	w := newWire(t, srv)
	q := queue("a:b")
	w.enqueue(q, "x:y", "p")
	w.expect(w.claim(q), []any{"x:y", "p", int64(1)}, "claim")
	w.expect(w.call("complete", q.keys("complete", "x:y"), "x:y"), int64(1), "complete")
	w.expect(w.row(q.job("x:y"))["state"], "done", "state")
}
