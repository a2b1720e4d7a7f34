package main

import (
	"bytes"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/stand/node"
)

// redisCLI runs redis-cli against n in its terminal form (--no-raw) and
// returns what it printed.
func redisCLI(t *testing.T, n *node.Node, args ...string) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(n.Port), "--no-raw"}, args...)...).Output()
	if err != nil {
		t.Fatalf("redis-cli %v: %v", args, err)
	}
	return string(out)
}

// TestShowPrintsWhatRedisCLIShows: the demo prints every reply as
// redis-cli shows the same command on the same server, the node's keys of
// the demo queue included; replies of every RESP2 shape.
func TestShowPrintsWhatRedisCLIShows(t *testing.T) { node.EachServer(t, testShowLikeRedisCLI) }

func testShowLikeRedisCLI(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Role: node.Module, Server: srv.Path})
	for _, cmd := range [][]string{
		{"HSET", "emq:{quotes}:job:JOB0KHTOWnGLuC", "state", "active", "payload", `{"quote":"hello"}`,
			"note", "two\nlines\tand \\ \r\x07\x08\x01", "name", "caf\xc3\xa9 \xff"},
		{"ZADD", "emq:{quotes}:active", "1700000030000", "JOB0KHTOWnGLuC"},
		{"RPUSH", "twelve", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"},
		{"XADD", "stream", "1-1", "a", "b", "c", "d"},
		{"SET", "plain", "v"},
	} {
		if _, err := node.RawDo(n.Addr, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{
		{"SET", "k", "v"},
		{"GET", "absent"},
		{"STRLEN", "plain"},
		{"HGET", "plain", "f"},
		{"LRANGE", "twelve", "0", "-1"},
		{"XRANGE", "stream", "-", "+"},
		{"ZRANGE", "absent", "0", "-1"},
		{"GET", "emq:{quotes}:job:JOB0KHTOWnGLuC"},
		{"HGETALL", "emq:{quotes}:job:JOB0KHTOWnGLuC"},
	} {
		raw, err := node.RawDo(n.Addr, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := formatCLI(raw)
		if err != nil {
			t.Errorf("%v: %v", cmd, err)
			continue
		}
		if want := redisCLI(t, n, cmd...); got != want {
			t.Errorf("%v:\n got %q\nwant %q (redis-cli)", cmd, got, want)
		}
	}

	var out bytes.Buffer
	show(&out, n, "now")
	text, ok := strings.CutPrefix(out.String(), "module node, now:\n")
	if !ok || !strings.HasSuffix(text, "\n\n") {
		t.Fatalf("show printed:\n%s", out.String())
	}
	// A prompt line per command, then its reply as redis-cli prints it,
	// every line indented by two spaces.
	blocks := strings.Split(strings.TrimSuffix(text, "\n"), "  "+n.Addr+"> ")
	if len(blocks) != len(showCommands)+1 || blocks[0] != "" {
		t.Fatalf("show printed %d commands for %d:\n%s", len(blocks)-1, len(showCommands), out.String())
	}
	for i, cmd := range showCommands {
		body, ok := strings.CutPrefix(blocks[i+1], strings.Join(cmd, " ")+"\n")
		if !ok {
			t.Errorf("block %d is not %v:\n%s", i, cmd, blocks[i+1])
			continue
		}
		if got, want := strings.ReplaceAll("\n"+body, "\n  ", "\n")[1:], redisCLI(t, n, cmd...); got != want {
			t.Errorf("show %v:\n%s\nredis-cli:\n%s", cmd, body, want)
		}
	}
	t.Logf("show:\n%s", out.String())
}
