package control

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/internal/controltest"
	"github.com/emqproxy/emqproxy/control/keycopy"
	"github.com/emqproxy/emqproxy/control/table"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestFailedCopyLeavesNothingOnTheTarget: a move that gives up while the
// queue is served (here: the target runs out of memory partway through the
// first round) deletes what it copied to the target and says so.
func TestFailedCopyLeavesNothingOnTheTarget(t *testing.T) {
	src, dst := controltest.Pair(t, node.Redis())
	ctx := context.Background()
	controltest.FillLarge(t, src, "q", 3000)
	info, err := dst.C.Do(ctx, dst.C.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "used_memory:")
	used, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Room for a part of the first round's 1.1 MiB.
	limit := strconv.FormatInt(used+256<<10, 10)
	controltest.Must(t, dst.C, dst.C.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", limit).ParameterValue("maxmemory-policy", "noeviction").Build())
	out := &lineWriter{}
	_, err = (&Mover{Queue: "q", To: "dst", Nodes: map[string]*table.Node{"src": src, "dst": dst}, FileRoute: func(string) string { return "src" },
		LargeKey: 4 << 10, Chunk: 200, Wait: time.Second, Out: out}).Run(ctx)
	t.Logf("mover:\n%s", out)
	if !errors.Is(err, table.ErrMove) || !strings.Contains(err.Error(), "OOM") || !strings.Contains(err.Error(), "copied to dst were deleted") {
		t.Fatalf("the move ended with %v, want the target's OOM refusal and the copy deleted", err)
	}
	if left, _ := keycopy.ScanQueue(ctx, dst, "q", 0); len(left) != 0 {
		t.Errorf("%d keys of q left on the target: %v", len(left), left)
	}
	if srcKeys, _ := keycopy.ScanQueue(ctx, src, "q", 0); len(srcKeys) == 0 {
		t.Errorf("the source lost its keys")
	}
}
