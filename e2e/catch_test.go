package e2e

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestCatchesBrokenVerbsIntegration proves the suite can fail: the
// lifecycle scenario runs through the proxy in front of module builds that
// are each subtly wrong in one verb (stand/module, EMQ_BREAK_<TOKEN>), and
// every one must be told apart from the scripts node, by an assertion of
// the scenario or by the comparison.
func TestCatchesBrokenVerbsIntegration(t *testing.T) {
	node.Long(t)
	node.EachServer(t, testCatchesBrokenVerbsIntegration)
}

func testCatchesBrokenVerbsIntegration(t *testing.T, server node.Server) {
	if testing.Short() {
		t.Skip("skipped in -short: builds and starts one module node per broken verb")
	}
	m := LoadMap(t)
	ref := NewTranscript(t, testCtx(t), StartScripts(t, server, m))
	lifecycle(t, ref)
	ref.Finish()
	for _, s := range m.Scripts {
		if s.Verb == "" {
			continue
		}
		t.Run(s.Verb, func(t *testing.T) {
			pr := &probe{TB: t}
			tr := NewTranscript(pr, testCtx(t), StartProxied(t, server, m, "EMQ_BREAK_"+s.Verb))
			pr.run(func() {
				lifecycle(pr, tr)
				tr.Finish()
			})
			diffs := Compare(ref, tr)
			switch {
			case len(pr.failures) > 0:
				t.Logf("caught by the scenario: %s", pr.failures[0])
			case len(diffs) > 0:
				t.Logf("caught by the comparison: %s", FormatDiffs(ScriptsPath, ProxyPath, diffs[:1]))
			default:
				t.Errorf("the build with EMQ_BREAK_%s went unnoticed", s.Verb)
			}
		})
	}
}

// probe is a testing.TB that records failures instead of failing the
// test, so a scenario can run against a build that is wrong on purpose.
// Fatal stops the scenario's goroutine (run), as it does in a test.
type probe struct {
	testing.TB
	mu       sync.Mutex
	failures []string
}

func (p *probe) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func (p *probe) Helper() {}

func (p *probe) Error(args ...any) { p.record(fmt.Sprint(args...)) }

func (p *probe) Errorf(format string, args ...any) { p.record(fmt.Sprintf(format, args...)) }

func (p *probe) Fatal(args ...any) {
	p.record(fmt.Sprint(args...))
	runtime.Goexit()
}

func (p *probe) Fatalf(format string, args ...any) {
	p.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (p *probe) Fail() { p.record("Fail") }

func (p *probe) FailNow() {
	p.record("FailNow")
	runtime.Goexit()
}

func (p *probe) Failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.failures) > 0
}

func (p *probe) record(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failures = append(p.failures, msg)
}
