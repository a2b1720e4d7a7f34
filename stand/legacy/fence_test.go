package legacy_test

import (
	"errors"
	"testing"

	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestFenceClaimsBrandOnUnbrandedNode(t *testing.T) {
	node.EachServer(t, testFenceClaimsBrandOnUnbrandedNode)
}

func testFenceClaimsBrandOnUnbrandedNode(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, NoBrand: true})
	_, rec := dial(t, legacy.Options{Addr: n.Addr})

	var got []string
	for _, c := range rec.ops("fence") {
		got = append(got, c.Line[0]+" -> "+c.Reply.String())
	}
	want := []string{`GET -> nil`, `SET -> "OK"`, `GET -> "echomq:4.0.0"`}
	if len(got) != len(want) {
		t.Fatalf("fence exchange %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("fence exchange %q, want %q", got, want)
		}
	}
	if set := rec.ops("fence")[1].Line; len(set) != 4 || set[3] != "NX" || set[2] != legacy.DefaultBrand {
		t.Fatalf("brand written with %q, want SET {emq}:version echomq:4.0.0 NX", set)
	}
	if v, ok := get(t, n.Client(t), legacy.VersionKey); !ok || v != legacy.DefaultBrand {
		t.Fatalf("version key %q (present %v), want %q", v, ok, legacy.DefaultBrand)
	}
}

func TestFenceRefusesModuleBrand(t *testing.T) { node.EachServer(t, testFenceRefusesModuleBrand) }

func testFenceRefusesModuleBrand(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, Brand: "echomq:6.0.0"})
	c, err := legacy.Dial(testCtx(t), legacy.Options{Addr: n.Addr})
	if err == nil {
		c.Close()
		t.Fatal("dial passed the fence on a node branded echomq:6.0.0")
	}
	var fe *legacy.FenceError
	if !errors.As(err, &fe) || !errors.Is(err, legacy.ErrFence) {
		t.Fatalf("dial error %v (%T), want a *FenceError", err, err)
	}
	if fe.Got != "echomq:6.0.0" || fe.Absent {
		t.Fatalf("fence error %+v", fe)
	}
	if s := err.Error(); s != `{:version_fence, "echomq:6.0.0"}` {
		t.Fatalf("fence error prints %q", s)
	}
	// The fence only reads a branded key: the module's brand is untouched.
	if v, _ := get(t, n.Client(t), legacy.VersionKey); v != "echomq:6.0.0" {
		t.Fatalf("version key became %q", v)
	}
}

func TestFenceOwnBrandOnly(t *testing.T) { node.EachServer(t, testFenceOwnBrandOnly) }

func testFenceOwnBrandOnly(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, Brand: "echomq:4.1.0"})
	dial(t, legacy.Options{Addr: n.Addr, Brand: "echomq:4.1.0"})
	_, err := legacy.Dial(testCtx(t), legacy.Options{Addr: n.Addr})
	var fe *legacy.FenceError
	if !errors.As(err, &fe) || fe.Got != "echomq:4.1.0" {
		t.Fatalf("default-brand client on an echomq:4.1.0 node: %v, want the fence refusal", err)
	}
}

func TestFenceErrorText(t *testing.T) {
	for _, tc := range []struct {
		err  legacy.FenceError
		want string
	}{
		{legacy.FenceError{Got: "echomq:6.0.0"}, `{:version_fence, "echomq:6.0.0"}`},
		{legacy.FenceError{Absent: true}, `{:version_fence, :absent}`},
		{legacy.FenceError{Refused: "EMQPROXY upstream not fenced"}, `{:version_fence, {:error, "EMQPROXY upstream not fenced"}}`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("%+v prints %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestBootCommandsRunBeforeFence(t *testing.T) { node.EachServer(t, testBootCommandsRunBeforeFence) }

func testBootCommandsRunBeforeFence(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, Password: "s3cret"})
	c, rec := dial(t, legacy.Options{Addr: n.Addr, Password: "s3cret", ClientName: "worker-1"})

	var order []string
	for _, call := range rec.calls {
		order = append(order, call.Op+":"+call.Line[0])
	}
	want := []string{"boot:AUTH", "boot:CLIENT", "fence:GET"}
	if len(order) != len(want) {
		t.Fatalf("connect sent %q, want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("connect sent %q, want %q", order, want)
		}
	}
	if pw := rec.calls[0].Line[1]; pw == "s3cret" {
		t.Fatal("the password was recorded")
	}
	name, err := c.Do(testCtx(t), "CLIENT", "GETNAME")
	if err != nil {
		t.Fatal(err)
	}
	if name.Kind != legacy.KindString || name.Str != "worker-1" {
		t.Fatalf("CLIENT GETNAME = %s", name)
	}

	_, err = legacy.Dial(testCtx(t), legacy.Options{Addr: n.Addr, Password: "wrong"})
	if !errors.Is(err, legacy.ErrBoot) {
		t.Fatalf("wrong password: %v, want ErrBoot", err)
	}
}
