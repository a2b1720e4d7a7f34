package tail

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/resp"
)

// The reader of a node's replication stream. The mover joins the stream of
// a queue's source node as a replica would, so it learns command by
// command (member by member) what changed, where keyspace notifications
// name only the key.
//
// valkey-go does not speak this protocol (after PSYNC the node sends an RDB
// payload without a reply frame, then commands, not replies), so the
// reader frames it itself with a bufio.Reader of its own.
//
// How the reader behaves toward the node:
//
//   - It never sends REPLCONF listening-port (nothing listens): while it
//     reads, the node lists it in INFO replication as a replica with
//     port=0 and offset=0.
//   - It acknowledges offset 0, every second and whenever the node asks
//     (REPLCONF GETACK). The node drops a replica that stays silent for
//     repl-timeout, so the acknowledgements keep the link up; WAIT counts
//     only replicas whose acknowledged offset reaches the write, so the
//     reader is never counted as a copy of anything. min-replicas-to-write
//     counts replicas by the age of their last acknowledgement, so the
//     reader would count toward it: a node with min-replicas-to-write set
//     is refused.
//   - When the node has a replication backlog, the reader joins with a
//     partial resynchronisation from the node's current offset: no fork.
//     Otherwise the node sends a full synchronisation. The reader asks
//     for an empty RDB first (REPLCONF rdb-filter-only "", Redis 7.0 and
//     Valkey): the node still forks, but its child writes no data, so the
//     join costs the node neither the serialisation of its dataset nor
//     the transfer. A node that refuses the filter sends its whole RDB,
//     which the reader skips as it streams by.
//   - The stream names its database with SELECT, but only when it changes:
//     after a partial join the database of the commands is unknown (-1)
//     until the stream's first SELECT, unless the node has only one
//     database (databases 1, or cluster mode). A full synchronisation
//     always starts with a SELECT.

// Errors of the replication stream.
var (
	// ErrReplRefused is wrapped when the node cannot be read as a replica
	// (a master set under Sentinel, a replica, min-replicas-to-write set,
	// a command of the handshake refused): the mover tracks the queue with
	// keyspace notifications instead.
	ErrReplRefused = errors.New("replication stream refused")
	// ErrReplStream is wrapped when the stream breaks: the connection
	// closed or went silent, the node sent what the reader does not
	// understand, or the stream was closed.
	ErrReplStream = errors.New("replication stream lost")
)

const (
	// replIdle is how long the reader waits for any byte once it asked to
	// synchronise: the node's default repl-timeout. The node pings its
	// replicas every repl-ping-replica-period (10 s by default) and sends
	// a newline every second while it prepares an RDB.
	replIdle = 60 * time.Second
	// replAckEvery is the period of the reader's acknowledgements (a
	// replica's own).
	replAckEvery = time.Second
	// Bounds of what the stream may carry: proto-max-bulk-len's default,
	// and a command's arguments.
	replMaxBulk = 512 << 20
	replMaxArgs = 1 << 20
	// replMaxLine bounds a line (a length header or an inline command; the
	// server's own inline limit is 64 KiB) and is the reader's buffer.
	replMaxLine = 64 << 10
	// replMaxReply bounds a handshake reply (INFO replication).
	replMaxReply = 1 << 20
	// dbUnknown is the database of commands before the stream names one.
	dbUnknown = -1
)

// replAck is REPLCONF ACK 0 (see the reader's notes above for why 0).
var replAck = []byte("*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$1\r\n0\r\n")

// replInfo says how the stream was joined.
type replInfo struct {
	Full    bool   // the node sent a full synchronisation (it forked for an RDB), skipped by the reader
	Empty   bool   // the full synchronisation's RDB was filtered to no data (REPLCONF rdb-filter-only)
	Skipped int64  // bytes of RDB payload skipped
	ReplID  string // the replication id the stream continues
	Offset  int64  // the offset the stream starts at
	Delay   string // what quickJoin did to the node's repl-diskless-sync-delay ("": nothing)
}

// replStream is one connection to a node in the replica's role.
type replStream struct {
	name string // the node's name, for errors
	conn net.Conn
	br   *bufio.Reader
	idle *atomic.Int64 // replConn's per-read allowance, ns
	wto  time.Duration // write deadline, and a handshake reply's (NodeOptions.ReplyTimeout)

	wmu sync.Mutex // serializes writes (next's answers, the ack loop)

	db int // the database of the stream's commands (dbUnknown until named)

	done      chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	err       error // why the stream ended (Close, a failed acknowledgement)

	// What the reader consumed, for diagnostics: newlines before the RDB,
	// the RDB's framing ("len" or "eof"), PINGs and GETACKs of the stream.
	keepalives, pings, getacks int
	rdbForm                    string
}

// replConn sets a read deadline of now+idle before every read when idle is
// set: any byte that arrives extends the wait.
type replConn struct {
	net.Conn
	idle *atomic.Int64
}

func (c replConn) Read(p []byte) (int, error) {
	if d := time.Duration(c.idle.Load()); d > 0 {
		_ = c.Conn.SetReadDeadline(time.Now().Add(d))
	}
	return c.Conn.Read(p)
}

// openReplStream dials the node of o as a replica would and joins its
// replication stream from now on. ctx bounds the opening only; the stream
// lasts until Close. The dial and the TLS handshake take at most
// o.Timeout. The replies of AUTH, INFO, CONFIG GET and REPLCONF are
// awaited o.ReplyTimeout each (DefaultReplyTimeout when zero), as the
// mover's other commands are, and the reader's writes are bounded by it:
// a node on a loaded machine may take seconds to answer, which must not
// fail a move; a node that stopped answering still fails the opening.
// The PSYNC reply and the RDB payload are awaited as long as bytes keep
// arriving (replIdle between two), as a replica waits.
func openReplStream(ctx context.Context, o table.NodeOptions) (*replStream, replInfo, error) {
	return dialRepl(ctx, o, true)
}

// dialRepl is openReplStream; emptyRDB says whether a full synchronisation
// asks for an empty RDB (false only to read a whole one, as from a node
// without the filter).
func dialRepl(ctx context.Context, o table.NodeOptions, emptyRDB bool) (*replStream, replInfo, error) {
	var info replInfo
	if o.Sentinel != nil {
		return nil, info, fmt.Errorf("%w: %s is master set %s under Sentinel: the reader reads one node's stream and follows no failover (sentinels would also list it as a replica)", ErrReplRefused, o.Name, o.Sentinel.Master)
	}
	to, rto := o.Timeouts()
	d := net.Dialer{Timeout: to}
	nc, err := netaddr.DialContext(ctx, &d, o.Address) // host:port or unix:/path
	if err != nil {
		return nil, info, fmt.Errorf("%w: %s (%s): %w", ErrReplStream, o.Name, o.Address, err)
	}
	if o.TLS != nil {
		cfg := o.TLS.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(o.Address)
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, to)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = nc.Close()
			return nil, info, fmt.Errorf("%w: %s (%s): TLS: %w", ErrReplStream, o.Name, o.Address, err)
		}
		nc = tc
	}
	idle := new(atomic.Int64)
	r := &replStream{name: o.Name, conn: nc, idle: idle, wto: rto, db: dbUnknown, done: make(chan struct{})}
	r.br = bufio.NewReaderSize(replConn{Conn: nc, idle: idle}, replMaxLine)
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	info, err = r.handshake(o, rto, emptyRDB)
	if !stop() {
		err = fmt.Errorf("%w: %s: opening: %w", ErrReplStream, o.Name, ctx.Err())
	}
	if err != nil {
		_ = nc.Close()
		return nil, replInfo{}, err
	}
	go r.ackLoop()
	return r, info, nil
}

// handshake checks the node, asks to synchronise (for an empty RDB when
// emptyRDB), skips the RDB if one comes, and sends the first
// acknowledgement.
func (r *replStream) handshake(o table.NodeOptions, to time.Duration, emptyRDB bool) (replInfo, error) {
	var info replInfo
	if o.Password != "" {
		args := []string{"AUTH", o.Password}
		if o.Username != "" {
			args = []string{"AUTH", o.Username, o.Password}
		}
		if _, err := r.call(to, args...); err != nil {
			return info, err
		}
	}
	if o.ClientName != "" {
		if _, err := r.call(to, "CLIENT", "SETNAME", o.ClientName); err != nil {
			return info, err
		}
	}
	rep, err := r.call(to, "INFO", "replication")
	if err != nil {
		return info, err
	}
	f := infoFields(rep.str)
	if f["role"] != "master" {
		return info, fmt.Errorf("%w: %s is not a primary (INFO replication says role:%s): the reader reads a primary's stream only", ErrReplRefused, r.name, f["role"])
	}
	if v, err := r.config(to, "min-replicas-to-write"); err != nil {
		return info, err
	} else if err := minReplicas(r.name, v); err != nil {
		return info, err
	}
	dbs, err := r.config(to, "databases")
	if err != nil {
		return info, err
	}
	cluster, err := r.config(to, "cluster-enabled")
	if err != nil {
		return info, err
	}
	if dbs == "1" || cluster == "yes" {
		r.db = 0 // the only database: the stream never needs to name it
	}
	if _, err := r.call(to, "REPLCONF", "capa", "eof", "capa", "psync2"); err != nil {
		return info, err
	}

	psync := []string{"PSYNC", "?", "-1"}
	if f["repl_backlog_active"] == "1" {
		off, err := strconv.ParseInt(f["master_repl_offset"], 10, 64)
		if err != nil {
			return info, fmt.Errorf("%w: %s: INFO replication: master_repl_offset %q is not an integer", ErrReplStream, r.name, f["master_repl_offset"])
		}
		info.ReplID, info.Offset = f["master_replid"], off+1
		psync = []string{"PSYNC", info.ReplID, strconv.FormatInt(info.Offset, 10)}
	} else if emptyRDB {
		// The RDB of a full synchronisation carries nothing the reader
		// uses. A node without the filter (before Redis 7.0) or an ACL
		// that refuses it answers an error: then the whole RDB comes.
		rep, err := r.call(to, "REPLCONF", "rdb-filter-only", "")
		info.Empty = err == nil && rep.str == "OK"
		if err != nil && !errors.Is(err, ErrReplRefused) {
			return info, err
		}
	}
	// A full synchronisation may wait (repl-diskless-sync-delay, a running
	// fork) before it answers: the node sends newlines meanwhile.
	if err := r.send(to, psync...); err != nil {
		return info, err
	}
	r.idle.Store(int64(replIdle))
	_ = r.conn.SetReadDeadline(time.Time{})
	line, err := r.line(true)
	if err != nil {
		return info, r.broken("PSYNC reply", err)
	}
	word, rest, _ := strings.Cut(string(line), " ")
	switch word {
	case "+CONTINUE":
		if rest != "" {
			info.ReplID = rest
		}
	case "+FULLRESYNC":
		id, off, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(off, 10, 64)
		if id == "" || err != nil {
			return info, fmt.Errorf("%w: %s: PSYNC answered %q, not +FULLRESYNC <id> <offset>", ErrReplStream, r.name, line)
		}
		info.Full, info.ReplID, info.Offset = true, id, n+1
		if info.Skipped, err = r.skipRDB(); err != nil {
			return info, err
		}
	default:
		if len(line) > 0 && line[0] == '-' {
			return info, fmt.Errorf("%w: %s: PSYNC answered %s", ErrReplRefused, r.name, line[1:])
		}
		return info, fmt.Errorf("%w: %s: PSYNC answered %q", ErrReplStream, r.name, clip(line))
	}
	// The node starts the stream of a diskless synchronisation on the first
	// acknowledgement.
	if err := r.write(replAck); err != nil {
		return info, r.broken("acknowledging", err)
	}
	return info, nil
}

// skipRDB reads the RDB payload of a full synchronisation and drops it as
// it streams by: "$<len>\r\n" and len bytes (from a file), or
// "$EOF:<mark>\r\n", the payload and the same 40-byte mark (diskless).
func (r *replStream) skipRDB() (int64, error) {
	line, err := r.line(true)
	if err != nil {
		return 0, r.broken("RDB header", err)
	}
	if len(line) == 0 || line[0] != '$' {
		return 0, fmt.Errorf("%w: %s: protocol: the RDB header is %q, not $<length> or $EOF:<mark>", ErrReplStream, r.name, clip(line))
	}
	if mark, ok := bytes.CutPrefix(line[1:], []byte("EOF:")); ok {
		if len(mark) != 40 {
			return 0, fmt.Errorf("%w: %s: protocol: the RDB header %q has a mark of %d bytes, not 40", ErrReplStream, r.name, clip(line), len(mark))
		}
		r.rdbForm = "eof"
		return r.skipToMark(bytes.Clone(mark))
	}
	n, ok := resp.ParseInt(line[1:])
	if !ok || n < 0 {
		return 0, fmt.Errorf("%w: %s: protocol: the RDB header %q has no length", ErrReplStream, r.name, clip(line))
	}
	r.rdbForm = "len"
	got, err := io.CopyN(io.Discard, r.br, n)
	if err != nil {
		return got, r.broken(fmt.Sprintf("RDB payload (%d of %d bytes read)", got, n), err)
	}
	return got, nil
}

// skipToMark drops bytes up to and including mark, never reading past it
// (the stream after it waits for the acknowledgement), with no buffer but
// the reader's own and the mark's length.
func (r *replStream) skipToMark(mark []byte) (int64, error) {
	var skipped int64 // bytes consumed, all payload so far
	tail := make([]byte, 0, len(mark)-1)
	win := make([]byte, 0, len(mark)-1+replMaxLine)
	for {
		if _, err := r.br.Peek(1); err != nil {
			return skipped, r.broken(fmt.Sprintf("diskless RDB payload (%d bytes read, no end mark)", skipped), err)
		}
		chunk, _ := r.br.Peek(r.br.Buffered())
		win = append(append(win[:0], tail...), chunk...)
		if i := bytes.Index(win, mark); i >= 0 {
			end := i + len(mark) - len(tail) // of chunk
			_, _ = r.br.Discard(end)
			return skipped + int64(i-len(tail)), nil
		}
		_, _ = r.br.Discard(len(chunk))
		skipped += int64(len(chunk))
		keep := min(len(mark)-1, len(win))
		tail = append(tail[:0], win[len(win)-keep:]...)
	}
}

// next returns the next write command of the stream and the database
// (SELECT index) it applies to: dbUnknown (-1) before the stream names one
// (after a partial join, see the reader's notes). It consumes what is the
// replication protocol's own: PING, SELECT (tracked), MULTI and EXEC
// (dropped: the caller sees the commands inside in order), and REPLCONF
// GETACK (answered). Every other command is returned, PUBLISH included.
// Errors wrap ErrReplStream (and io.EOF when the node closed the
// connection). Calls of next must not overlap.
func (r *replStream) next() (db int, argv [][]byte, err error) {
	for {
		if err := r.ended(); err != nil {
			return r.db, nil, err
		}
		argv, err := r.command()
		if err != nil {
			if e := r.ended(); e != nil {
				return r.db, nil, e
			}
			return r.db, nil, r.broken("the stream", err)
		}
		if len(argv) == 0 {
			continue
		}
		switch name := argv[0]; {
		case bytes.EqualFold(name, []byte("PING")):
			r.pings++
		case bytes.EqualFold(name, []byte("MULTI")), bytes.EqualFold(name, []byte("EXEC")):
		case bytes.EqualFold(name, []byte("SELECT")):
			n, err := strconv.Atoi(string(argv[len(argv)-1]))
			if len(argv) != 2 || err != nil || n < 0 {
				return r.db, nil, fmt.Errorf("%w: %s: protocol: SELECT with arguments %q", ErrReplStream, r.name, argv[1:])
			}
			r.db = n
		case bytes.EqualFold(name, []byte("REPLCONF")) && len(argv) > 1 && bytes.EqualFold(argv[1], []byte("GETACK")):
			r.getacks++
			if err := r.write(replAck); err != nil {
				r.fail(r.broken("answering GETACK", err))
			}
		default:
			return r.db, argv, nil
		}
	}
}

// Close ends the stream (the node drops the replica). next returns an
// error after it.
func (r *replStream) Close() error {
	var err error
	r.closeOnce.Do(func() {
		r.mu.Lock()
		if r.err == nil {
			r.err = fmt.Errorf("%w: %s: the stream was closed", ErrReplStream, r.name)
		}
		r.mu.Unlock()
		close(r.done)
		if err = r.conn.Close(); errors.Is(err, net.ErrClosed) {
			err = nil // a failed acknowledgement closed it first
		}
	})
	return err
}

// ackLoop acknowledges offset 0 every second until the stream ends.
func (r *replStream) ackLoop() {
	t := time.NewTicker(replAckEvery)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
			if err := r.write(replAck); err != nil {
				r.fail(r.broken("acknowledging", err))
				return
			}
		}
	}
}

// fail ends the stream with err (the first cause wins) and closes the
// connection, which wakes a next waiting for the node.
func (r *replStream) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	_ = r.conn.Close()
}

func (r *replStream) ended() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// write sends b whole, one writer at a time, within the write deadline.
func (r *replStream) write(b []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.conn.SetWriteDeadline(time.Now().Add(r.wto))
	_, err := r.conn.Write(b)
	return err
}

// broken describes a failure to read or write what while in the stream.
func (r *replStream) broken(what string, err error) error {
	switch {
	case errors.Is(err, ErrReplStream):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		d := time.Duration(r.idle.Load())
		if d == 0 {
			d = r.wto // a handshake reply
		}
		return fmt.Errorf("%w: %s: %s: nothing arrived within %v: %w", ErrReplStream, r.name, what, d, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %s: %s: the node closed the connection: %w", ErrReplStream, r.name, what, err)
	}
	return fmt.Errorf("%w: %s: %s: %w", ErrReplStream, r.name, what, err)
}

// clip shortens what the node sent for an error message.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
