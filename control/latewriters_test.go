package control

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/emqproxy/emqproxy/stand/node"
)

func TestDataClientNameHasNoSpace(t *testing.T) {
	for id, want := range map[string]string{
		"host-12-ab12cd34": "emqproxy-data:host-12-ab12cd34",
		"a b\nc\"d":        "emqproxy-data:a_b_c_d",
		"p1.x:9_y":         "emqproxy-data:p1.x:9_y",
	} {
		if got := table.DataClientName(id); got != want {
			t.Errorf("DataClientName(%q) = %q; want %q", id, got, want)
		}
	}
}

// TestCloseWaitedOutClosesOnlyThatProxysConnections: the mover closes on
// the source every connection named as a data connection of a proxy it
// waited out, and no other: another proxy's, an unnamed client's and its
// own stay open.
func TestCloseWaitedOutClosesOnlyThatProxysConnections(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	src, err := table.Dial(table.NodeOptions{Name: "src", Address: n.Addr, Password: n.Opts.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	open := func(name string) net.Conn {
		nc, err := net.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		if name != "" {
			if _, err := nc.Write([]byte("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$" + strconv.Itoa(len(name)) + "\r\n" + name + "\r\n")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 16)
			if k, err := nc.Read(buf); err != nil || string(buf[:k]) != "+OK\r\n" {
				t.Fatalf("CLIENT SETNAME %s: %q %v", name, buf[:k], err)
			}
		}
		return nc
	}
	gone := []net.Conn{open(table.DataClientName("gone")), open(table.DataClientName("gone"))}
	kept := []net.Conn{open(table.DataClientName("live")), open(""), open("other")}

	m := &Mover{Queue: "billing"}
	if err := m.closeWaitedOut(context.Background(), src, []string{"gone"}); err != nil {
		t.Fatal(err)
	}
	closed := func(nc net.Conn) bool {
		_ = nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, err := nc.Read(make([]byte, 1))
		return err != nil && !strings.Contains(err.Error(), "timeout")
	}
	for i, nc := range gone {
		if !closed(nc) {
			t.Errorf("data connection %d of the proxy waited out is open", i)
		}
	}
	for i, nc := range kept {
		if closed(nc) {
			t.Errorf("connection %d of another client was closed", i)
		}
	}
	if err := m.closeWaitedOut(context.Background(), src, nil); err != nil {
		t.Errorf("no proxy waited out: %v", err)
	}
}
