package moduletest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// recorder stands in for a test inside a test: it records failures instead
// of reporting them, and stops the transcript at the first fatal one.
type recorder struct {
	testing.TB
	failures []string
}

type stopTranscript struct{}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, a...))
}
func (r *recorder) Error(a ...any) { r.failures = append(r.failures, fmt.Sprint(a...)) }
func (r *recorder) Fatalf(format string, a ...any) {
	r.Errorf(format, a...)
	panic(stopTranscript{})
}
func (r *recorder) Fatal(a ...any) {
	r.Error(a...)
	panic(stopTranscript{})
}

// runRecorded runs one transcript against r and returns what it recorded.
func runRecorded(r *recorder, vc verbCase, x q) (failures []string) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stopTranscript); !ok {
				panic(p)
			}
		}
		failures = r.failures
	}()
	vc.run(x)
	return nil
}

// TestBrokenBuildsAreCaught builds the module with -DEMQ_BREAK_<TOKEN> for
// each token and checks that the verb transcripts notice: the proof that
// the transcripts can fail, and that each test build is really broken.
func TestBrokenBuildsAreCaught(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testBrokenBuildsAreCaught)
}

func testBrokenBuildsAreCaught(t *testing.T, srv node.Server) {
	if testing.Short() {
		t.Skip("builds the module fourteen times; skipped with -short")
	}
	for _, s := range shapes {
		t.Run(s.token, func(t *testing.T) {
			n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module, ModuleDefs: []string{"EMQ_BREAK_" + s.token}})
			c := dial(t, n.Addr)
			runID := infoField(c, "server", "run_id")
			caught := 0
			for i, vc := range verbCases {
				if !strings.Contains(vc.name, s.token) {
					continue
				}
				r := &recorder{TB: t}
				x := q{t: r, c: c.with(r), name: fmt.Sprintf("b%d", i), runID: runID}
				if f := runRecorded(r, vc, x); len(f) > 0 {
					caught++
					t.Logf("%s caught: %s", vc.name, f[0])
				}
			}
			if caught == 0 {
				t.Errorf("the EMQ_BREAK_%s build passed every %s transcript", s.token, s.token)
			}
		})
	}
}
