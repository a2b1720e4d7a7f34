package verify_test

import (
	"os"
	"slices"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

// Every EMQ_BREAK_<TOKEN> build of the module must be reported as that
// token and only that token. It builds and runs fourteen modules (about two
// minutes on a small machine), so it runs only when EMQ_VERIFY_SWEEP=1.
func TestEveryBrokenVerbIsCaughtIntegration(t *testing.T) {
	if os.Getenv("EMQ_VERIFY_SWEEP") != "1" {
		t.Skip("set EMQ_VERIFY_SWEEP=1 to run the harness against all fourteen EMQ_BREAK_<TOKEN> builds")
	}
	for _, tok := range shamap.Tokens {
		t.Run(tok, func(t *testing.T) {
			rep := runHarness(t, node.Redis(), "EMQ_BREAK_"+tok)
			if got := rep.DifferingTokens(); !slices.Equal(got, []string{tok}) {
				t.Errorf("EMQ_BREAK_%s: differing tokens %v, want [%s]", tok, got, tok)
			}
		})
	}
}
