package legacy_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
	"github.com/valkey-io/valkey-go"
)

func setBrand(t *testing.T, vc valkey.Client, brand string) {
	t.Helper()
	if err := vc.Do(testCtx(t), vc.B().Set().Key(legacy.VersionKey).Value(brand).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// killConn closes the client's connection from the server side.
func killConn(t *testing.T, c *legacy.Client, vc valkey.Client) {
	t.Helper()
	id, err := c.Do(testCtx(t), "CLIENT", "ID")
	if err != nil || id.Kind != legacy.KindInt {
		t.Fatalf("CLIENT ID: %v %v", id, err)
	}
	cmd := vc.B().ClientKill().Id(id.Int).Build()
	if err := vc.Do(testCtx(t), cmd).Error(); err != nil {
		t.Fatal(err)
	}
}

// untilAnswer repeats Stats until it answers without a connection error,
// which valkey-go's transparent reconnect makes happen after a kill. It
// returns the last error (nil, or a fence refusal).
func untilAnswer(t *testing.T, c *legacy.Client) error {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Stats(testCtx(t), "rq")
		var fe *legacy.FenceError
		if err == nil || errors.As(err, &fe) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client never answered again after the kill: %v", err)
		}
	}
}

func TestReconnectRerunsFence(t *testing.T) { node.EachServer(t, testReconnectRerunsFence) }

func testReconnectRerunsFence(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	vc := n.Client(t)
	c, _ := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	k := chk{t}
	wantEq(t, "fences after dial", c.Fences(), 1)

	// An explicit reconnect runs the fence again (one GET on a branded node).
	before := stats(t, vc)
	if err := c.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "fences after Reconnect", c.Fences(), 2)
	wantEq(t, "GETs of the reconnect", delta(before, stats(t, vc), "get")["get"], 1)
	wantEq(t, "enqueue after reconnect", k.b(c.Enqueue(ctx, "rq", "j1", "p")), true)

	// A connection the server closed is reopened by valkey-go, through the fence.
	killConn(t, c, vc)
	if err := untilAnswer(t, c); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "fences after a server-side kill", c.Fences(), 3)

	// The brand changed: the next reconnect stops the client.
	setBrand(t, vc, "echomq:6.0.0")
	err := c.Reconnect(ctx)
	var fe *legacy.FenceError
	if !errors.As(err, &fe) || fe.Got != "echomq:6.0.0" {
		t.Fatalf("reconnect to a re-branded node: %v, want the fence refusal", err)
	}
	before = stats(t, vc)
	if _, err := c.Enqueue(ctx, "rq", "j2", "p"); !errors.As(err, &fe) {
		t.Fatalf("enqueue on a stopped client: %v, want the fence refusal", err)
	}
	wantEq(t, "evalsha on a stopped client", delta(before, stats(t, vc), "evalsha")["evalsha"], 0)

	// Brand restored: Reconnect starts it again.
	setBrand(t, vc, legacy.DefaultBrand)
	if err := c.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	wantEq(t, "enqueue after the brand came back", k.b(c.Enqueue(ctx, "rq", "j2", "p")), true)

	// The brand changes under a live connection: the transparent reconnect
	// after a kill meets the fence, which stops the client.
	setBrand(t, vc, "echomq:6.0.0")
	killConn(t, c, vc)
	if err := untilAnswer(t, c); !errors.As(err, &fe) {
		t.Fatalf("after the kill: %v, want the fence refusal", err)
	}
	if c.Stopped() == nil {
		t.Fatal("the fence refusal did not stop the client")
	}
	before = stats(t, vc)
	for i := 0; i < 3; i++ {
		if _, _, err := c.Claim(ctx, "rq", 1000); !errors.As(err, &fe) {
			t.Fatalf("claim on a stopped client: %v", err)
		}
	}
	d := delta(before, stats(t, vc), "get", "exists", "evalsha")
	wantEq(t, "commands a stopped client sent", d["get"]+d["exists"]+d["evalsha"], 0)
}

func TestReconnectUnderConcurrentCalls(t *testing.T) {
	node.EachServer(t, testReconnectUnderConcurrentCalls)
}

func testReconnectUnderConcurrentCalls(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	c, _ := dial(t, legacy.Options{Addr: n.Addr})
	ctx := testCtx(t)
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func(w int) {
			for i := 0; i < 200; i++ {
				if _, err := c.Enqueue(ctx, "cq", strconv.Itoa(w)+"-"+strconv.Itoa(i), "p"); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(w)
	}
	for i := 0; i < 5; i++ {
		if err := c.Reconnect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for w := 0; w < 4; w++ {
		if err := <-errs; err != nil {
			t.Fatalf("a call failed across Reconnect: %v", err)
		}
	}
	st, err := c.Stats(ctx, "cq")
	if err != nil {
		t.Fatal(err)
	}
	wantEq(t, "pending after 800 enqueues", st[0], 800)
}
