package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestFailedCopyLeavesNothingOnTheTarget: a move that gives up while the
// queue is served (here: its record deleted after the first round, as by
// an abort elsewhere) deletes what it copied to the target and says so.
func TestFailedCopyLeavesNothingOnTheTarget(t *testing.T) {
	src, dst := pair(t, node.Redis())
	ctx := context.Background()
	fillLarge(t, src, "q", 3000)
	out := &lineWriter{onLine: func(l string) {
		if strings.HasPrefix(l, "round 1 ") {
			must(t, src.C, src.C.B().Del().Key(MoveKey("q")).Build())
		}
	}}
	_, err := (&Mover{Queue: "q", To: "dst", Nodes: map[string]*Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
		LargeKey: 4 << 10, Chunk: 200, Wait: time.Second, Out: out}).Run(ctx)
	t.Logf("mover:\n%s", out)
	if !errors.Is(err, ErrMove) || !strings.Contains(err.Error(), "is gone") || !strings.Contains(err.Error(), "copied to dst were deleted") {
		t.Fatalf("the move ended with %v, want the record gone and the copy deleted", err)
	}
	if left, _ := scanQueue(ctx, dst, "q", 0); len(left) != 0 {
		t.Errorf("%d keys of q left on the target: %v", len(left), left)
	}
	if srcKeys, _ := scanQueue(ctx, src, "q", 0); len(srcKeys) == 0 {
		t.Errorf("the source lost its keys")
	}
}
