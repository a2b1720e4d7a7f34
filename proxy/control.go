package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/control"
	"github.com/emqproxy/emqproxy/proxy/plan"
	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// The control loop: routes of moved queues read from the nodes.
//
// With Options.Control set, the proxy keeps a lease on every upstream node
// and reads that node's control table (package control) with each renewal,
// every ControlOptions.Poll. The tables of all nodes are merged (per queue,
// the highest epoch wins) into a plan.ControlState: the queues that are
// held, and the owner of every moved queue, which overrides the routes of
// the file (plan.Router.WithOwners). A new state is applied in this order:
//
//  1. the router with the new owners is stored (s.routes), then the state;
//  2. the loop waits until no command admitted under an older state is in
//     flight (plan.ControlState.InFlight: the plan counts a command when it
//     admits it, and the session uncounts it once its reply is read, hold.go);
//  3. only then the node's epoch is acknowledged on the node.
//
// So when a proxy acknowledges the epoch at which a queue became held,
// none of its commands for that queue is in flight, and no later one is sent
// until the queue is released. A session checks the state before it loads
// the router, and the router is stored before the state that needs it, so a
// command admitted under a state is routed by that state's owners or later.
//
// A lease is valid from when its renewal was sent, for ControlOptions.Lease
// less one poll: always before the node's key expires. A command for a
// queue routed to a node whose lease is not valid is held (the plan asks
// the controller, Leased; hold.go) until a
// renewal succeeds; a renewal applies the node's table before the lease
// counts again, so a proxy paused past its lease sees every move made
// meanwhile before it writes again. Without Options.Control, none of this
// runs and the data path pays one nil check per command.
//
// No lease counts until the table of every upstream has been read once.
// The entry that decides a queue's owner may be on one node alone (a hold,
// a release or an abort is written on the source only; a flip whose write
// on the source was lost is on the target only), and a proxy started while
// that node is unreachable would route the queue by the other tables, to a
// node whose lease is valid. So until then every queue's commands are held
// (they wait, then get `-TRYAGAIN queue <q> has no lease on upstream <u>`;
// keyless commands pass), the lease gauges stay 0 and the log names the
// upstreams not read yet. A node that becomes unreachable later keeps its
// last table in the merge; only its own queues are held, by its lease.

// Defaults of ControlOptions' zero durations.
const (
	DefaultControlPoll  = 250 * time.Millisecond
	DefaultControlLease = 2 * time.Second
	DefaultHold         = 5 * time.Second
)

// ControlOptions turns on the control table. Zero durations take the
// defaults: Poll DefaultControlPoll (250ms), Lease DefaultControlLease
// (2s), Hold DefaultHold (5s).
type ControlOptions struct {
	// Poll is how often every lease is renewed and every table read.
	Poll time.Duration
	// Lease is the expiry of the proxy's lease key on each node.
	Lease time.Duration
	// Hold is the longest a command waits for its queue; then it gets
	// -TRYAGAIN and nothing is sent.
	Hold time.Duration
	// ID names the proxy in the nodes' registries (default
	// <host>-<pid>-<random>).
	ID string
}

// controller runs the control loop of one server.
type controller struct {
	srv   *Server
	opts  ControlOptions
	log   *zap.Logger
	nodes []*ctlNode
	byUp  map[*upstream.Upstream]*ctlNode
	state atomic.Pointer[plan.ControlState]
	start time.Time // the monotonic origin of ctlNode.valid
	host  string

	mu   sync.Mutex   // orders router stores: apply and SwapRoutes
	base *plan.Router // the routes of the file, without owners

	// allRead: every node's table was read once (ctlNode.have); until
	// then no lease counts. Only the loop's goroutine uses it.
	allRead      bool
	warnedUnread bool // the wait for the unread tables was logged

	heldNow  prometheus.Gauge
	holdSecs prometheus.Observer
	epoch    prometheus.Gauge
	leaseOK  *prometheus.GaugeVec
	skipN    prometheus.Gauge
	skipped  map[skipKey]string // the entries skipped at the last round, reported once (report)
	fwd      forwardTables      // tables only move forward (control_forward.go)

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ctlNode is the control loop's view of one upstream node.
type ctlNode struct {
	up      *upstream.Upstream
	cn      *control.Node // nil until dialed
	valid   atomic.Int64  // the lease is valid until start+valid (ns); 0: no lease
	table   control.Table
	have    bool  // table was read at least once
	applied int64 // the node epoch acknowledged
}

// newController prepares the control loop; start runs it.
func newController(s *Server, o ControlOptions) (*controller, error) {
	if o.Poll <= 0 {
		o.Poll = DefaultControlPoll
	}
	if o.Lease <= 0 {
		o.Lease = DefaultControlLease
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.Lease < 2*o.Poll {
		return nil, fmt.Errorf("%w: control lease %v must be at least twice the poll %v", ErrOptions, o.Lease, o.Poll)
	}
	host, _ := os.Hostname()
	if o.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	c := &controller{srv: s, opts: o, log: s.log.Named("control").With(zap.String("proxy", o.ID)),
		byUp: map[*upstream.Upstream]*ctlNode{}, start: time.Now(), host: host, base: s.routes.Load()}
	for _, u := range s.ups {
		n := &ctlNode{up: u}
		c.nodes = append(c.nodes, n)
		c.byUp[u] = n
	}
	c.state.Store(plan.NewControlState(0, map[string]bool{}, map[string]*upstream.Upstream{}))
	c.heldNow = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_held_commands",
		Help: "Commands waiting now for a queue that is moving or a node whose lease lapsed."})
	hold := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "emqproxy_control_hold_seconds",
		Help: "How long held commands waited (released or refused).", Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2, 5, 10}})
	c.holdSecs = hold
	c.epoch = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_epoch",
		Help: "The epoch of the control table the proxy applied (the highest of its nodes)."})
	c.leaseOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "emqproxy_control_lease",
		Help: "1 while the proxy holds a lease on the upstream."}, []string{"upstream"})
	c.skipN = prometheus.NewGauge(prometheus.GaugeOpts{Name: "emqproxy_control_skipped_entries",
		Help: "Control-table entries the proxy skipped at its last read (malformed, newer than their table, or naming an upstream it does not have)."})
	if reg := s.opts.Registry; reg != nil {
		for _, col := range []prometheus.Collector{c.heldNow, hold, c.epoch, c.leaseOK, c.skipN} {
			if err := reg.Register(col); err != nil {
				return nil, fmt.Errorf("%w: metrics: %w", ErrOptions, err)
			}
		}
	}
	if err := c.initForward(s.opts.Registry); err != nil {
		return nil, err
	}
	return c, nil
}

// run starts the loop.
func (c *controller) run() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(c.opts.Poll)
		defer t.Stop()
		for {
			c.round(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	c.log.Info("control table on", zap.Duration("poll", c.opts.Poll), zap.Duration("lease", c.opts.Lease), zap.Duration("hold", c.opts.Hold))
}

// stop ends the loop and gives up the leases.
func (c *controller) stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if n.cn != nil {
			_ = n.cn.Deregister(ctx, c.opts.ID)
			n.cn.Close()
		}
	}
}

// round renews every lease, reading every table, applies the merged table
// when it changed, then acknowledges and validates the leases (once every
// table was read: allRead).
func (c *controller) round(ctx context.Context) {
	type renewed struct {
		ok   bool
		sent time.Time
		t    control.Table
	}
	res := make([]renewed, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sent := time.Now()
			t, err := c.renew(ctx, n)
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("control lease renewal failed", zap.String("upstream", n.up.Name()), zap.Error(err))
				}
				return
			}
			res[i] = renewed{ok: true, sent: sent, t: t}
		}()
	}
	wg.Wait()
	var tables []control.Table
	var unread []string
	skipped := map[skipKey]string{}
	for i, n := range c.nodes {
		if res[i].ok {
			c.adopt(n, res[i].t) // never an older table than n's (control_forward.go)
		}
		if n.have {
			tables = append(tables, n.table)
			for q, why := range n.table.Skipped {
				skipped[skipKey{n.up.Name(), q}] = why
			}
		} else {
			unread = append(unread, n.up.Name())
		}
	}
	c.apply(control.Merge(tables...), skipped)
	c.report(skipped)
	c.checkAllRead(unread)
	for i, n := range c.nodes {
		if res[i].ok && c.allRead {
			n.valid.Store(int64(res[i].sent.Add(c.opts.Lease - c.opts.Poll).Sub(c.start)))
			c.leaseOK.WithLabelValues(n.up.Name()).Set(1)
		} else if c.leaseLeft(n, time.Now()) <= 0 {
			c.leaseOK.WithLabelValues(n.up.Name()).Set(0)
		}
		if !res[i].ok {
			continue
		}
		if n.table.Epoch != n.applied {
			n.applied = n.table.Epoch
			if err := n.cn.Ack(ctx, c.registration(n)); err != nil && ctx.Err() == nil {
				c.log.Warn("control acknowledgement failed", zap.String("upstream", n.up.Name()), zap.Error(err))
			}
		}
	}
}

// checkAllRead sets allRead once no table is unread, after the merged table
// of them all was applied (round): from then on the leases count. Until
// then, the first round logs which upstreams' tables are missing.
func (c *controller) checkAllRead(unread []string) {
	switch {
	case c.allRead:
	case len(unread) == 0:
		c.allRead = true
		c.log.Info("control tables of every upstream read: queues are served")
	case !c.warnedUnread:
		c.warnedUnread = true
		c.log.Warn("control tables not read yet: every queue's commands are held until they are (a queue's owner may be decided by a table of these alone)",
			zap.Strings("upstreams", unread))
	}
}

// renew renews the lease on n and reads its table, dialing first if needed.
func (c *controller) renew(ctx context.Context, n *ctlNode) (control.Table, error) {
	if n.cn == nil {
		o := n.up.Options()
		cn, err := control.Dial(control.NodeOptions{Name: o.Name, Address: o.Address, Sentinel: o.Sentinel,
			Username: o.Username, Password: o.Password, DB: o.DB, TLS: o.TLSConfig, Timeout: c.opts.Lease / 2})
		if err != nil {
			return control.Table{}, err
		}
		n.cn = cn
	}
	rctx, cancel := context.WithTimeout(ctx, c.opts.Lease/2)
	defer cancel()
	return n.cn.Renew(rctx, c.registration(n), c.opts.Lease)
}

// registration is the proxy's line on n.
func (c *controller) registration(n *ctlNode) control.Registration {
	return control.Registration{ID: c.opts.ID, Applied: n.applied, Renewed: time.Now().UnixMilli(),
		LeaseMs: c.opts.Lease.Milliseconds(), Host: c.host, PID: os.Getpid()}
}

// leaseLeft is how long n's lease is still valid at now (<= 0: lapsed).
func (c *controller) leaseLeft(n *ctlNode, now time.Time) time.Duration {
	v := n.valid.Load()
	if v == 0 {
		return 0
	}
	return time.Duration(v) - now.Sub(c.start)
}

// skipKey names a skipped entry: the upstream whose table holds it ("" for
// the merged table) and its queue.
type skipKey struct{ up, queue string }

// report logs the entries skipped that were not skipped, or not for the
// same reason, at the last round, and sets the gauge: a bad entry is
// reported once, not at every poll.
func (c *controller) report(skipped map[skipKey]string) {
	for k, why := range skipped {
		if c.skipped[k] != why {
			c.log.Error("control table entry skipped; every other queue follows the rest of the table",
				zap.String("upstream", k.up), zap.String("queue", k.queue), zap.String("why", why))
		}
	}
	c.skipped = skipped
	c.skipN.Set(float64(len(skipped)))
}

// apply installs the merged table t when it differs from the state in
// force, then waits until nothing admitted under the old state is in
// flight. An owner this proxy does not have is added to skipped (the
// file's route stays for that queue).
func (c *controller) apply(t control.Table, skipped map[skipKey]string) {
	cur := c.state.Load()
	st := plan.NewControlState(t.Epoch, map[string]bool{}, map[string]*upstream.Upstream{})
	for q, e := range t.Queues {
		if e.State == control.Held {
			st.Held[q] = true
			continue
		}
		u := c.srv.byName[e.Owner]
		if u == nil {
			skipped[skipKey{"", q}] = "owner " + strconv.Quote(e.Owner) + " is not an upstream of this proxy; the file's route stays"
			continue
		}
		st.Owner[q] = u
	}
	if st.Epoch == cur.Epoch && maps.Equal(st.Held, cur.Held) && maps.Equal(st.Owner, cur.Owner) {
		return
	}
	c.mu.Lock()
	c.srv.routes.Store(c.base.WithOwners(st.Owner))
	c.state.Store(st)
	c.mu.Unlock()
	cur.Supersede()
	for cur.InFlight() != 0 {
		time.Sleep(200 * time.Microsecond)
	}
	c.epoch.Set(float64(st.Epoch))
	c.log.Info("control table applied", zap.Int64("epoch", st.Epoch), zap.Int("held", len(st.Held)), zap.Int("moved", len(st.Owner)))
}

// setRoutes replaces the file's routes (a reload), keeping the owners.
func (c *controller) setRoutes(r *plan.Router) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.base = r
	c.srv.routes.Store(r.WithOwners(c.state.Load().Owner))
}

// Leased reports whether the proxy's lease on u is valid at now (the plan
// asks it before it admits a command for a queue routed to u).
func (c *controller) Leased(u *upstream.Upstream, now time.Time) bool {
	return c.leaseLeft(c.byUp[u], now) > 0
}

// Current is the control state in force.
func (c *controller) Current() *plan.ControlState { return c.state.Load() }

// LeaseLapsed reports whether the proxy holds a lease on u's node and it
// lapsed by now (session.Control).
func (c *controller) LeaseLapsed(u *upstream.Upstream, now time.Time) bool {
	n := c.byUp[u]
	return n != nil && c.leaseLeft(n, now) <= 0
}

// HoldLimits returns ControlOptions.Hold and Poll (session.Control).
func (c *controller) HoldLimits() (hold, poll time.Duration) { return c.opts.Hold, c.opts.Poll }

// Holding counts a command waiting for its held queue until done is called
// (session.Control).
func (c *controller) Holding() (done func()) {
	began := time.Now()
	c.heldNow.Inc()
	return func() {
		c.heldNow.Dec()
		c.holdSecs.Observe(time.Since(began).Seconds())
	}
}

// ControlID returns the proxy's id in the nodes' registries ("" without
// the control table).
func (s *Server) ControlID() string {
	if s.ctl == nil {
		return ""
	}
	return s.ctl.opts.ID
}
