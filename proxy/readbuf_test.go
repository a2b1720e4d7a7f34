package proxy

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/emqproxy/emqproxy/proxy/conn"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// batches returns how many batches the proxy served (the batch latency
// histogram's count, over every kind).
func batches(t *testing.T, h *harness) uint64 {
	t.Helper()
	var total uint64
	for _, o := range h.srv.met.Latency {
		var m dto.Metric
		if err := o.(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		total += m.GetHistogram().GetSampleCount()
	}
	return total
}

// TestPipelineLargerThanTheReadBufferIsOneBatch: a client whose pipelines
// overflow the initial read buffer (16 SETs of 2 KiB: 33 KiB) gets a bigger
// buffer, so after the first pipelines each one is framed and forwarded as
// one batch, not split into round trips by the buffer's size.
func TestPipelineLargerThanTheReadBufferIsOneBatch(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	h := startProxy(t, n, nil)
	c := h.dial()
	val := strings.Repeat("v", 2048)
	var pipeline []byte
	for i := range 16 {
		pipeline = resp.AppendCommand(pipeline, "SET", "big:"+string(rune('a'+i)), val)
	}
	if len(pipeline) <= conn.InitialReadBuf*2 {
		t.Fatalf("the pipeline (%d bytes) must overflow two initial buffers", len(pipeline))
	}
	send := func() {
		c.write(pipeline)
		for range 16 {
			c.read().is("+OK\r\n")
		}
	}
	for range 3 { // the buffer grows while reads fill it
		send()
	}
	// With the initial buffer alone each pipeline takes three batches
	// (7 + 7 + 2 commands). A pipeline may still arrive in two pieces.
	ones := 0
	for range 5 {
		before := batches(t, h)
		send()
		got := batches(t, h) - before
		if got >= 3 {
			t.Errorf("a %d-byte pipeline took %d batches", len(pipeline), got)
		}
		if got == 1 {
			ones++
		}
	}
	if ones == 0 {
		t.Error("no pipeline was forwarded as one batch")
	}
}
