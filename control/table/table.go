package table

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/discovery"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/rewrite"
)

// The keys of the control table on every node.
const (
	KeyEpoch   = rewrite.ControlKeyPrefix + ":epoch"
	KeyQueues  = rewrite.ControlKeyPrefix + ":queues"
	KeyProxies = rewrite.ControlKeyPrefix + ":proxies"
	keyLease   = rewrite.ControlKeyPrefix + ":lease:"
	keyMove    = rewrite.ControlKeyPrefix + ":move:"
)

// LeaseKey is the key of proxy id's lease on a node.
func LeaseKey(id string) string { return keyLease + id }

// MoveKey is the key of the record of a move of queue in progress.
func MoveKey(queue string) string { return keyMove + queue }

// KeyMoves is the hash, on a move's source, of the queues with a move
// record (queue -> unix ms of the start): queue status finds moves that
// hold nothing yet (step copying) without scanning.
const KeyMoves = rewrite.ControlKeyPrefix + ":moves"

// ErrTable is wrapped by errors about a node's control table that cannot be
// read (a malformed entry).
var ErrTable = errors.New("control: bad table")

// States of a queue's entry.
const (
	Held  = "held"  // the queue's commands wait (a move is copying it)
	Owned = "owned" // the queue is served by Owner
)

// Entry is one queue's line of the table.
type Entry struct {
	Epoch int64
	State string // Held or Owned
	Owner string // an upstream name
}

// String encodes the entry as it is stored: "<epoch> <state> <owner>".
func (e Entry) String() string { return strconv.FormatInt(e.Epoch, 10) + " " + e.State + " " + e.Owner }

// ParseEntry decodes a stored entry.
func ParseEntry(s string) (Entry, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Entry{}, fmt.Errorf("%w: entry %q is not \"<epoch> <state> <owner>\"", ErrTable, s)
	}
	ep, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ep <= 0 {
		return Entry{}, fmt.Errorf("%w: entry %q: epoch %q is not a positive integer", ErrTable, s, f[0])
	}
	if f[1] != Held && f[1] != Owned {
		return Entry{}, fmt.Errorf("%w: entry %q: state %q is neither held nor owned", ErrTable, s, f[1])
	}
	return Entry{Epoch: ep, State: f[1], Owner: f[2]}, nil
}

// Table is one node's control table.
type Table struct {
	Epoch  int64
	Queues map[string]Entry
	// Skipped are the entries read but not taken, by queue, with why: one
	// that does not parse, one whose epoch is past the table's (a move
	// writes an entry and the epoch in one transaction, so no true entry
	// is newer than its table), one for a queue no key can name. Skipping
	// an entry leaves every other queue as the rest of the table says;
	// whoever reads the table reports them (the proxy's log and
	// emqproxy_control_skipped_entries, `queue status`).
	Skipped map[string]string
}

// Merge combines the tables of several nodes: queue by queue the entry of
// the highest epoch wins; the epoch is the highest of all. Skipped entries
// stay skipped (the result's Skipped is empty).
//
// Two different entries of one queue at one epoch cannot be written (the
// mover's writes are fenced: package control's fence.go), but a node
// restored from an old copy could show one; whatever the order of the
// tables, the tie goes to the same entry (tieWins), so every proxy and
// every mover decide alike
// (before, the first table in the configuration's order won a tie).
func Merge(tables ...Table) Table {
	out := Table{Queues: map[string]Entry{}}
	for _, t := range tables {
		out.Epoch = max(out.Epoch, t.Epoch)
		for q, e := range t.Queues {
			if cur, ok := out.Queues[q]; !ok || e.Epoch > cur.Epoch || e.Epoch == cur.Epoch && tieWins(e, cur) {
				out.Queues[q] = e
			}
		}
	}
	return out
}

// tieWins says whether e wins over cur at one epoch: a hold (the queue's
// commands wait: nothing is written to either owner), then the owner
// first by name.
func tieWins(e, cur Entry) bool {
	if e.State != cur.State {
		return e.State == Held
	}
	return e.Owner < cur.Owner
}

// Registration is a proxy's line in {emqproxy}:proxies.
type Registration struct {
	ID      string `json:"-"`
	Applied int64  `json:"applied"`  // the node epoch the proxy applied
	Renewed int64  `json:"renewed"`  // unix ms of its last renewal, its clock
	LeaseMs int64  `json:"lease_ms"` // its lease
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// Live is set when read: the proxy's lease key exists on the node.
	Live bool `json:"-"`
}

// NodeOptions says how to reach a node.
type NodeOptions struct {
	Name    string
	Address string
	// Sentinel, when set instead of Address, names a master set under
	// Sentinel: the client is valkey-go's Sentinel client
	// (discovery.Options.ClientOption), which finds the primary, checks
	// its role and follows it across failovers. Username, Password and TLS
	// are the data nodes'; the sentinels' own are in Sentinel.
	Sentinel *discovery.Options
	Username string
	Password string
	DB       int
	TLS      *tls.Config
	Timeout  time.Duration // dial timeout (default DefaultDialTimeout)
	// ReplyTimeout bounds the wait for replies: a command's (a
	// pipeline's, as a whole) and each reply of the replication stream's
	// handshake. Past it the connection is broken. Zero is
	// DefaultReplyTimeout. It is a bound on a node that stopped
	// answering, not a measure of a healthy one: a node on a loaded
	// machine, or one busy with a large pipeline of the mover's, answers
	// in seconds, and the mover must ride that out. The mover passes the
	// proxies' own reply bound (timeouts.upstream); the proxies' control
	// loop passes half its lease, as its renewals must be back within it.
	ReplyTimeout time.Duration
	// ClientName names the connections (CLIENT SETNAME): the nodes'
	// CLIENT LIST and SLOWLOG show whose they are.
	ClientName string
	// RESP2 speaks RESP2 (the mover: large replies of pairs decode in
	// about half the time of RESP3's nested ones).
	RESP2 bool
	// AckReplicas and AckTimeout are the upstream's ack_replicas and
	// ack_timeout: the mover confirms its writes on a master set with
	// `WAIT AckReplicas AckTimeout` (Node.Confirm) before it relies on
	// them, as a proxy confirms a client's write before it answers.
	AckReplicas int
	AckTimeout  time.Duration
}

// Node is a valkey-go client to one node, for the control table.
type Node struct {
	Name string
	C    valkey.Client
	// Opts is how the node was dialed (the mover dials a second connection
	// for its subscription).
	Opts NodeOptions
}

// Defaults of NodeOptions' zero timeouts.
const (
	DefaultDialTimeout  = 2 * time.Second
	DefaultReplyTimeout = 10 * time.Second
)

// Timeouts returns o's dial and reply timeouts, defaults applied.
func (o NodeOptions) Timeouts() (dial, reply time.Duration) {
	dial, reply = o.Timeout, o.ReplyTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	if reply <= 0 {
		reply = DefaultReplyTimeout
	}
	return dial, reply
}

// Dial connects to a node (through its sentinels for a master set under
// Sentinel). The client is single-connection, without client side caching,
// and never retries a command. A command's replies are awaited
// o.ReplyTimeout (a pipeline's as a whole).
func Dial(o NodeOptions) (*Node, error) {
	to, rto := o.Timeouts()
	co := valkey.ClientOption{InitAddress: []string{o.Address}, ForceSingleClient: true, DialCtxFn: netaddr.DialValkey}
	where := o.Address
	if o.Sentinel != nil {
		so := *o.Sentinel
		so.Node = discovery.NodeAuth{Username: o.Username, Password: o.Password, TLSConfig: o.TLS}
		so.DialTimeout = to
		co, where = so.ClientOption(), "master "+so.Master
	}
	co.Username, co.Password, co.TLSConfig = o.Username, o.Password, o.TLS
	co.SelectDB = o.DB
	co.ClientName = o.ClientName
	co.AlwaysRESP2 = o.RESP2
	co.DisableCache = true
	co.DisableRetry = true
	co.Dialer = net.Dialer{Timeout: to}
	co.ConnWriteTimeout = rto
	co.BlockingPoolSize = 1
	co.PipelineMultiplex = -1
	c, err := valkey.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("upstream %s (%s): %w", o.Name, where, err)
	}
	return &Node{Name: o.Name, C: c, Opts: o}, nil
}

// Close closes the client.
func (n *Node) Close() { n.C.Close() }

// KeyConfirm is the key the mover writes to confirm what it wrote before.
const KeyConfirm = rewrite.ControlKeyPrefix + ":confirm"

// ErrNotConfirmed is wrapped when a node's replicas did not confirm the
// mover's writes in time.
var ErrNotConfirmed = errors.New("writes not confirmed by the replicas")

// Confirm waits until Opts.AckReplicas replicas of the node have every
// write made to it before the call, on any connection: a write of
// KeyConfirm and a WAIT on one connection (WAIT counts the replicas that
// reached the connection's last write, which the node applied after every
// earlier one). Nothing to do when AckReplicas is 0. A replica answers
// the write READONLY: the node is not the primary.
func (n *Node) Confirm(ctx context.Context) error {
	want := n.Opts.AckReplicas
	if want <= 0 {
		return nil
	}
	to := n.Opts.AckTimeout
	if to <= 0 {
		to = time.Second
	}
	c := n.C
	// WAIT is a blocking command: valkey-go sends the whole pipeline on
	// one connection of its blocking pool.
	rs := c.DoMulti(ctx,
		c.B().Set().Key(KeyConfirm).Value(strconv.FormatInt(time.Now().UnixMilli(), 10)).Px(time.Minute).Build(),
		c.B().Wait().Numreplicas(int64(want)).Timeout(to.Milliseconds()).Build())
	if err := rs[0].Error(); err != nil {
		return fmt.Errorf("%w on %s: %w", ErrNotConfirmed, n.Name, err)
	}
	got, err := rs[1].AsInt64()
	if err != nil {
		return fmt.Errorf("%w on %s: WAIT: %w", ErrNotConfirmed, n.Name, err)
	}
	if got < int64(want) {
		return &ReplicasBehind{Node: n.Name, Want: int64(want), Got: got, Timeout: to}
	}
	return nil
}

// ReplicasBehind is Confirm's error when the node answered, but fewer of
// its replicas than asked reached its writes within the timeout: a
// replica down, resyncing or slow, which waiting may see through. It
// wraps ErrNotConfirmed.
type ReplicasBehind struct {
	Node      string
	Want, Got int64
	Timeout   time.Duration
}

func (e *ReplicasBehind) Error() string {
	return fmt.Sprintf("%v on %s: WAIT %d %d answered %d", ErrNotConfirmed, e.Node, e.Want, e.Timeout.Milliseconds(), e.Got)
}

func (e *ReplicasBehind) Unwrap() error { return ErrNotConfirmed }

// ReadTable reads the node's table. The entries are read before the epoch,
// so an entry written meanwhile (with its epoch, in one transaction) is
// never newer than the epoch read.
func (n *Node) ReadTable(ctx context.Context) (Table, error) {
	rs := n.C.DoMulti(ctx, n.C.B().Hgetall().Key(KeyQueues).Build(), n.C.B().Get().Key(KeyEpoch).Build())
	return parseTable(rs[1], rs[0])
}

// parseTable decodes the replies of GET epoch and HGETALL queues.
func parseTable(epoch, queues valkey.ValkeyResult) (Table, error) {
	for _, r := range []valkey.ValkeyResult{epoch, queues} {
		if err := r.NonValkeyError(); err != nil {
			return Table{Queues: map[string]Entry{}}, err
		}
	}
	em, _ := epoch.ToMessage()
	qm, _ := queues.ToMessage()
	return parseTableMsgs(em, qm)
}

// Renew renews proxy reg's lease on the node and reads the node's table, in
// one transaction: the table read is the one in force when the lease began.
func (n *Node) Renew(ctx context.Context, reg Registration, lease time.Duration) (Table, error) {
	b, _ := json.Marshal(reg)
	c := n.C
	rs := c.DoMulti(ctx,
		c.B().Multi().Build(),
		c.B().Set().Key(LeaseKey(reg.ID)).Value(strconv.FormatInt(reg.Applied, 10)).Px(lease).Build(),
		c.B().Hset().Key(KeyProxies).FieldValue().FieldValue(reg.ID, string(b)).Build(),
		c.B().Get().Key(KeyEpoch).Build(),
		c.B().Hgetall().Key(KeyQueues).Build(),
		c.B().Exec().Build(),
	)
	for _, r := range rs[:5] {
		if err := r.Error(); err != nil {
			return Table{}, err
		}
	}
	arr, err := rs[5].ToArray()
	if err != nil {
		return Table{}, err
	}
	if len(arr) != 4 {
		return Table{}, fmt.Errorf("%w: renewal transaction answered %d replies", ErrTable, len(arr))
	}
	return parseTableMsgs(arr[2], arr[3])
}

// parseTableMsgs is parseTable over the messages of an EXEC reply. An
// epoch that is not an integer, or a queues key that is not a hash, is an
// error (the whole table is unreadable: a renewal fails, and the node's
// queues wait as for a lapsed lease); a bad entry is skipped (Skipped).
func parseTableMsgs(epoch, queues valkey.ValkeyMessage) (Table, error) {
	t := Table{Queues: map[string]Entry{}}
	if !epoch.IsNil() {
		s, err := epoch.ToString()
		if err != nil {
			return t, err
		}
		if t.Epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
			return t, fmt.Errorf("%w: %s is %q, not an integer", ErrTable, KeyEpoch, s)
		}
	}
	m, err := queues.AsStrMap()
	if err != nil {
		return t, err
	}
	for q, v := range m {
		e, err := ParseEntry(v)
		switch {
		case err != nil:
			t.skip(q, err.Error())
		case q == "" || strings.ContainsAny(q, "{}"):
			t.skip(q, fmt.Sprintf("queue name %q is not a queue name (empty, or braces)", q))
		case e.Epoch > t.Epoch:
			t.skip(q, fmt.Sprintf("entry %q: epoch %d is past the table's epoch %d", v, e.Epoch, t.Epoch))
		default:
			t.Queues[q] = e
		}
	}
	return t, nil
}

// skip records a skipped entry.
func (t *Table) skip(queue, why string) {
	if t.Skipped == nil {
		t.Skipped = map[string]string{}
	}
	t.Skipped[queue] = why
}

// Ack records that proxy reg applied the node's epoch reg.Applied.
func (n *Node) Ack(ctx context.Context, reg Registration) error {
	b, _ := json.Marshal(reg)
	return n.C.Do(ctx, n.C.B().Hset().Key(KeyProxies).FieldValue().FieldValue(reg.ID, string(b)).Build()).Error()
}

// Deregister removes proxy id's lease and registration (a clean shutdown).
func (n *Node) Deregister(ctx context.Context, id string) error {
	c := n.C
	for _, r := range c.DoMulti(ctx, c.B().Del().Key(LeaseKey(id)).Build(), c.B().Hdel().Key(KeyProxies).Field(id).Build()) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// Proxies lists the proxies registered on the node, each with whether its
// lease key still exists.
func (n *Node) Proxies(ctx context.Context) ([]Registration, error) {
	m, err := n.C.Do(ctx, n.C.B().Hgetall().Key(KeyProxies).Build()).AsStrMap()
	if err != nil {
		return nil, err
	}
	var out []Registration
	for id, v := range m {
		var r Registration
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("%w: proxy %q: %v", ErrTable, id, err)
		}
		r.ID = id
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, nil
	}
	cmds := make(valkey.Commands, len(out))
	for i, r := range out {
		cmds[i] = n.C.B().Exists().Key(LeaseKey(r.ID)).Build()
	}
	for i, res := range n.C.DoMulti(ctx, cmds...) {
		k, err := res.AsInt64()
		if err != nil {
			return nil, err
		}
		out[i].Live = k == 1
	}
	return out, nil
}

// ExecError is the first error of an EXEC's reply: the EXEC's own (the
// transaction discarded; or a nil reply, which valkey.IsValkeyNil tells:
// a watched key changed), else the first of its commands'.
func ExecError(exec valkey.ValkeyResult) error {
	if err := exec.Error(); err != nil {
		return err
	}
	arr, err := exec.ToArray()
	if err != nil {
		return err
	}
	for _, r := range arr {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}
