package rewrite

import "testing"

// BenchmarkDecide measures the hot path: a plain GET that passes and an
// EVALSHA of a pinned verb that is rewritten. Neither may allocate.
func BenchmarkDecide(b *testing.B) {
	p := &Policy{Map: testMap(b)}
	cases := []struct {
		name string
		args [][]byte
		want Action
	}{
		{name: "GET", args: argv("GET", "emq:{q}:job:1"), want: Pass},
		{name: "SET", args: argv("SET", "emq:{q}:job:1", "value"), want: Pass},
		{name: "EVALSHA verb", args: argv("EVALSHA", shaEnqueue, "2", "emq:{q}:job:1", "emq:{q}:pending", "1", "payload"),
			want: Rewrite},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			st := &State{Fenced: true}
			b.ReportAllocs()
			for b.Loop() {
				if d := Decide(c.args, st, p); d.Action != c.want {
					b.Fatalf("action %v", d.Action)
				}
			}
		})
	}
}

// TestDecideHotPathDoesNotAllocate keeps BenchmarkDecide's promise in the
// ordinary test run.
func TestDecideHotPathDoesNotAllocate(t *testing.T) {
	p := &Policy{Map: testMap(t)}
	st := &State{Fenced: true}
	for _, args := range [][][]byte{
		argv("GET", "emq:{q}:job:1"),
		argv("set", "k", "v"),
		argv("EVALSHA", shaEnqueue, "2", "emq:{q}:job:1", "emq:{q}:pending", "1", "payload"),
	} {
		if n := testing.AllocsPerRun(100, func() { Decide(args, st, p) }); n != 0 {
			t.Errorf("Decide(%q) allocates %v times", args[0], n)
		}
	}
}
