package legacy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestPipeline(t *testing.T) { node.EachServer(t, testPipeline) }

func testPipeline(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, rec := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)

	// 1000 mixed calls in one pipeline.
	b := c.Batch()
	for i := 0; i < 500; i++ {
		b.Enqueue("pp", "j"+strconv.Itoa(1000+i), "p"+strconv.Itoa(i))
	}
	for i := 0; i < 499; i++ {
		b.Claim("pp", 60000)
	}
	b.Stats("pp")
	wantEq(t, "batch length", b.Len(), 1000)
	before := stats(t, vc)
	res, err := b.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		ok, err := res[i].Bool()
		if err != nil || !ok {
			t.Fatalf("enqueue %d: %v %v", i, ok, err)
		}
	}
	for i := 0; i < 499; i++ {
		job, empty, err := res[500+i].Job()
		if err != nil || empty || job.ID != "j"+strconv.Itoa(1000+i) || job.Attempts != 1 {
			t.Fatalf("claim %d: %+v empty=%v err=%v", i, job, empty, err)
		}
	}
	st, err := res[999].Stats()
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "stats", st, [6]int64{1, 0, 499, 0, 0, 0})
	d := delta(before, stats(t, vc), "exists", "multi", "script|load")
	wantEq(t, "multi in a pipeline", d["multi"], 0)
	wantEq(t, "script loads", d["script|load"], 3)
	wantEq(t, "recorded claim lines", len(rec.ops(legacy.ScriptClaim)), 499)
	wantEq(t, "recorded pause reads", len(rec.ops("paused")), 1)
}

func TestTx(t *testing.T) { node.EachServer(t, testTx) }

func testTx(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, rec := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}
	// Warm the script cache, so the transaction is one MULTI/EXEC.
	k.b(c.Enqueue(ctx, "tq", "warm", "p"))
	k.b(c.Complete(ctx, "tq", "none"))
	if _, _, err := c.Peek(ctx, "tq", "none"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Eval(ctx, legacy.ScriptClaim, []string{legacy.Key("tq", "pending")}, nil); err != nil {
		t.Fatal(err)
	}

	before := stats(t, vc)
	fences := c.Fences()
	res, err := c.Tx().Enqueue("tq", "x", "px").Claim("tq", 60000).Claim("tq", 60000).Complete("tq", "x").Peek("tq", "x").Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`1`, `["warm", "p", 1]`, `["x", "px", 1]`, `1`, `["done", "1", "px"]`}
	for i, w := range want {
		wantEq(t, "reply "+strconv.Itoa(i), res[i].Reply.String(), w)
	}
	d := delta(before, stats(t, vc), "multi", "exec", "exists")
	wantEq(t, "multi", d["multi"], 1)
	wantEq(t, "exec", d["exec"], 1)
	wantEq(t, "pause reads", d["exists"] >= 1, true)
	// The dedicated connection of the transaction passed the fence too, and
	// so did every connection the client holds (the node's own client is
	// the only RESP3 one).
	if c.Fences() <= fences {
		t.Fatalf("fences %d after the transaction, %d before", c.Fences(), fences)
	}
	list, err := vc.Do(ctx, vc.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "client connections", int64(strings.Count(list, "resp=2")), c.Fences())

	// A refused line inside MULTI/EXEC is answered in its place, the others run.
	res, err = c.Tx().Enqueue("tq", "y", "py").Extend("tq", "y", -5).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "enqueue in tx", res[0].Reply.String(), "1")
	wantEq(t, "bad extend in tx", res[1].Reply.String(), "(error) EMQWIRE EMQ.EXTEND value 2 must be an integer")
	if _, err := res[1].Int(); err == nil {
		t.Fatal("decoding an error reply passed")
	}
	wantEq(t, "recorded complete lines", len(rec.ops(legacy.ScriptComplete)), 2)
}
