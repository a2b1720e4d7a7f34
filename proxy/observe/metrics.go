package observe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/emqproxy/emqproxy/rewrite"
	"github.com/emqproxy/emqproxy/shamap"
)

// Metrics are the proxy's Prometheus collectors. The per-command counters
// are resolved once, so counting a command is one atomic add.
//
// Names:
//
//	emqproxy_commands_total{decision,token}     commands by decision (pass, rewrite, refuse, local) and job-core token ("" for none)
//	emqproxy_refusals_total{reason}             refusals by reason
//	emqproxy_upstream_errors_total{upstream,kind} connection failures: dial, boot, fence, lost, timeout, protocol; probe (a readiness probe that got no verdict);
//	                                            discovery (no primary found), role (a node not the primary): Sentinel upstreams
//	emqproxy_upstream_reconnects_total{upstream} shared connections lost and reconnected
//	emqproxy_upstream_up{upstream}              1 while every shared connection is up
//	emqproxy_upstream_fenced{upstream}          1 while the fence holds
//	emqproxy_upstream_failovers_total{upstream} a Sentinel upstream's primary switched to another node (upstream/failover.go)
//	emqproxy_upstream_primary{upstream,address} 1 for a Sentinel upstream's primary confirmed last
//	emqproxy_upstream_unconfirmed_total{upstream} writes answered with the not-confirmed error: WAIT saw too few replicas (upstream/ack.go)
//	emqproxy_client_connections                 clients connected now
//	emqproxy_client_connections_total           clients accepted
//	emqproxy_client_rejected_total{reason}      clients refused or closed by a limit: max_clients, protocol, query_buffer, reply_bytes, write,
//	                                            subscriber_bytes (subscribe.go), memory_budget (budget.go), auth_failures, auth_timeout (authlimit.go)
//	emqproxy_client_isolated_total{reason}      clients moved to connections of their own for their share (share.go):
//	                                            command_bytes, reply_bytes, pipeline, slow_reader
//	emqproxy_client_isolated                    clients on connections of their own now
//	emqproxy_panics_total                       panics recovered (each closed one client)
//	emqproxy_batch_seconds{kind}                time from a client batch framed to its replies written;
//	                                            kind: rewrite (the batch holds a rewritten call), pass (it
//	                                            forwarded commands unchanged), local (answered by the proxy)
//	emqproxy_client_bytes_total{direction}      bytes read from clients (in) and written to them (out)
//	emqproxy_map_info{digest}                   1 for the map in use
type Metrics struct {
	Commands    [4][]prometheus.Counter // [action][token index+1]
	Refusals    *prometheus.CounterVec
	UpErrors    *prometheus.CounterVec
	Reconnects  *prometheus.CounterVec
	Up          *prometheus.GaugeVec
	Fenced      *prometheus.GaugeVec
	Failovers   *prometheus.CounterVec
	PrimaryOf   *prometheus.GaugeVec
	Unacked     *prometheus.CounterVec
	Clients     prometheus.Gauge
	Accepted    prometheus.Counter
	Rejected    *prometheus.CounterVec
	Isolated    *prometheus.CounterVec
	IsolatedNow prometheus.Gauge
	Panics      prometheus.Counter
	Latency     [3]prometheus.Observer // by BatchKind
	BytesIn     prometheus.Counter
	BytesOut    prometheus.Counter
	MapInfo     *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg (when not
// nil); isolated are the reasons of emqproxy_client_isolated_total, whose
// series start at 0.
func NewMetrics(reg prometheus.Registerer, isolated []string) (*Metrics, error) {
	m := &Metrics{
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_refusals_total", Help: "Commands refused, by reason.",
		}, []string{"reason"}),
		UpErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_upstream_errors_total", Help: "Upstream connection failures, by kind.",
		}, []string{"upstream", "kind"}),
		Reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_upstream_reconnects_total", Help: "Shared upstream connections lost and reconnected.",
		}, []string{"upstream"}),
		Up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "emqproxy_upstream_up", Help: "1 while every shared connection to the upstream is up.",
		}, []string{"upstream"}),
		Fenced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "emqproxy_upstream_fenced", Help: "1 while the upstream's fence holds.",
		}, []string{"upstream"}),
		Failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_upstream_failovers_total", Help: "Times a Sentinel upstream's primary switched to another node.",
		}, []string{"upstream"}),
		PrimaryOf: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "emqproxy_upstream_primary", Help: "1 for the primary a Sentinel upstream confirmed last, by address.",
		}, []string{"upstream", "address"}),
		Unacked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_upstream_unconfirmed_total", Help: "Writes answered with an error because WAIT confirmed fewer replicas than ack_replicas.",
		}, []string{"upstream"}),
		Clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "emqproxy_client_connections", Help: "Client connections open now.",
		}),
		Accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "emqproxy_client_connections_total", Help: "Client connections accepted.",
		}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_client_rejected_total", Help: "Clients refused or closed by a limit, by reason.",
		}, []string{"reason"}),
		Isolated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_client_isolated_total", Help: "Clients moved to upstream connections of their own for their share of the shared ones, by reason.",
		}, []string{"reason"}),
		IsolatedNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "emqproxy_client_isolated", Help: "Clients on upstream connections of their own now (their share of the shared ones).",
		}),
		Panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "emqproxy_panics_total", Help: "Panics recovered; each closed one client.",
		}),
		MapInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "emqproxy_map_info", Help: "1 for the digest of the pinned map in use.",
		}, []string{"digest"}),
	}
	for _, r := range isolated {
		m.Isolated.WithLabelValues(r) // every reason's series, at 0
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "emqproxy_batch_seconds",
		Help:    "Time from a client batch framed to its replies written, by kind (rewrite, pass, local).",
		Buckets: prometheus.ExponentialBuckets(20e-6, 2.5, 12),
	}, []string{"kind"})
	for k := range m.Latency {
		m.Latency[k] = latency.WithLabelValues(BatchKind(k).String())
	}
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "emqproxy_client_bytes_total", Help: "Bytes read from clients (in) and written to them (out).",
	}, []string{"direction"})
	m.BytesIn, m.BytesOut = bytes.WithLabelValues("in"), bytes.WithLabelValues("out")
	cmds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "emqproxy_commands_total", Help: "Client commands, by decision and job-core token.",
	}, []string{"decision", "token"})
	for a := rewrite.Pass; a <= rewrite.Local; a++ {
		row := make([]prometheus.Counter, len(shamap.Tokens)+1)
		row[0] = cmds.WithLabelValues(a.String(), "")
		for i, t := range shamap.Tokens {
			row[i+1] = cmds.WithLabelValues(a.String(), t)
		}
		m.Commands[a] = row
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{cmds, m.Refusals, m.UpErrors, m.Reconnects, m.Up, m.Fenced,
			m.Failovers, m.PrimaryOf, m.Unacked, m.Clients, m.Accepted, m.Rejected, m.Isolated, m.IsolatedNow, m.Panics, latency, bytes, m.MapInfo} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// tokenIndex maps a token to its column in commands.
var tokenIndex = func() map[string]int {
	m := make(map[string]int, len(shamap.Tokens))
	for i, t := range shamap.Tokens {
		m[t] = i + 1
	}
	return m
}()

// Command counts one decided command.
func (m *Metrics) Command(d *rewrite.Decision) {
	col := 0
	if d.Script != nil && d.Script.Verb != "" {
		col = tokenIndex[d.Script.Verb]
	}
	if int(d.Action) < len(m.Commands) {
		m.Commands[d.Action][col].Inc()
	}
	if d.Action == rewrite.Refuse {
		m.Refusals.WithLabelValues(string(d.Reason)).Inc()
	}
}

// UpstreamError counts a failure of the upstream name, by kind (errKind).
func (m *Metrics) UpstreamError(name, kind string) { m.UpErrors.WithLabelValues(name, kind).Inc() }

// Reject counts a client closed for reason (pubsub.Metrics).
func (m *Metrics) Reject(reason string) { m.Rejected.WithLabelValues(reason).Inc() }

// Reconnect counts a shared connection of the upstream name lost.
func (m *Metrics) Reconnect(name string) { m.Reconnects.WithLabelValues(name).Inc() }

// UpstreamState sets the upstream's up and fenced gauges.
func (m *Metrics) UpstreamState(name string, up, fenced bool) {
	m.Up.WithLabelValues(name).Set(b2f(up))
	m.Fenced.WithLabelValues(name).Set(b2f(fenced))
}

// Primary moves the upstream's primary info from old ("" for none) to addr.
func (m *Metrics) Primary(name, old, addr string) {
	if old != "" {
		m.PrimaryOf.DeleteLabelValues(name, old)
	}
	m.PrimaryOf.WithLabelValues(name, addr).Set(1)
}

// Failover counts a switch of the upstream's primary.
func (m *Metrics) Failover(name string) { m.Failovers.WithLabelValues(name).Inc() }

// Follows makes the upstream's failover series exist, at 0.
func (m *Metrics) Follows(name string) { m.Failovers.WithLabelValues(name) }

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// BatchKind classifies a client batch for the latency histogram: the most
// expensive path any of its commands took.
type BatchKind uint8

const (
	BatchLocal   BatchKind = iota // answered by the proxy: local replies and refusals
	BatchPass                     // forwarded commands unchanged
	BatchRewrite                  // forwarded a rewritten script call
)

// String is the kind's label in emqproxy_batch_seconds.
func (k BatchKind) String() string {
	switch k {
	case BatchPass:
		return "pass"
	case BatchRewrite:
		return "rewrite"
	}
	return "local"
}

// KindOf is the batch kind a decision makes a batch at least.
func KindOf(d *rewrite.Decision) BatchKind {
	switch d.Action {
	case rewrite.Rewrite:
		return BatchRewrite
	case rewrite.Pass:
		return BatchPass
	}
	return BatchLocal
}
