package scripts

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestMalformedCallsMatchModule sends the same malformed calls as EVALSHA to
// a scripts node and as EMQ.<TOKEN> to a module node: shape, value and
// row-key refusals must be byte-identical on both.
func TestMalformedCallsMatchModule(t *testing.T) { node.EachServer(t, testMalformedCallsMatchModule) }

func testMalformedCallsMatchModule(t *testing.T, srv node.Server) {
	if _, err := node.BuildModule(); errors.Is(err, node.ErrNoModuleSource) {
		t.Skipf("no module to compare with: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	sn := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	mn := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	for _, name := range Names() {
		if _, err := node.RawDo(sn.Addr, "SCRIPT", "LOAD", string(Body(name))); err != nil {
			t.Fatal(err)
		}
	}
	q := queue("parity")
	type call struct {
		keys, values []string
		valid        bool // well-formed: both sides answer without an error
	}
	for _, s := range Shapes {
		if s.Read {
			continue
		}
		keys, values := q.keys(s.Name, "J1"), goodValues[s.Name]
		calls := []call{
			{keys: append(slices.Clone(keys), q.key("x")), values: values},
			{keys: keys[:len(keys)-1], values: values},
			{keys: keys, values: append(slices.Clone(values), "x")},
		}
		if len(values) > 0 {
			calls = append(calls, call{keys: keys, values: values[:len(values)-1]})
		}
		for _, iv := range intValues[s.Name] {
			for _, v := range []string{"", "1.5", "-1", "+1", " 1", "9007199254740992", "0"} {
				bad := slices.Clone(values)
				bad[iv.j-1] = v
				calls = append(calls, call{keys, bad, v == "0" && !iv.limit})
			}
		}
		if i, ok := rowKey[s.Name]; ok {
			for _, row := range []string{q.job("J2"), queue("other").job("J1"), q.key("J1")} {
				bad := slices.Clone(keys)
				bad[i-1] = row
				calls = append(calls, call{keys: bad, values: values})
			}
		}
		for n, c := range calls {
			tail := append([]string{strconv.Itoa(len(c.keys))}, append(slices.Clone(c.keys), c.values...)...)
			script, err := node.RawDo(sn.Addr, append([]string{"EVALSHA", shamap.SHA(Body(s.Name))}, tail...)...)
			if err != nil {
				t.Fatal(err)
			}
			native, err := node.RawDo(mn.Addr, append([]string{"EMQ." + s.Verb}, tail...)...)
			if err != nil {
				t.Fatal(err)
			}
			if isErr := len(script) > 0 && script[0] == '-'; isErr == c.valid {
				t.Errorf("%s call %d %q: script replied %q", s.Name, n, tail, script)
			}
			if string(script) != string(native) {
				t.Errorf("%s call %d %q:\n script %q\n native %q", s.Name, n, tail, script, native)
			}
		}
	}
}
