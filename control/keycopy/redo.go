package keycopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"syscall"
	"time"

	"github.com/emqproxy/emqproxy/control/table"

	"github.com/valkey-io/valkey-go"
)

// A copy's round trip that lost its connection is sent again, on a new
// one, when sending it twice leaves the target as sending it once would,
// and the node is still the same server with the same data. Without this,
// a node that closes its clients' connections (CLIENT KILL, an idle
// timeout, a proxy or load balancer in front of it restarting) ended the
// attempt and threw its copy away; under the fault campaign that was 69
// of 160 stopped attempts, and a copy of a few seconds rarely outlived one
// such close.
//
// Three conditions, each needed:
//
//   - The connection was lost, not timed out: the node closed it (EOF, a
//     reset, a broken pipe) or could not be reached (a refused dial, the
//     client closing). A node runs nothing of a connection it closed, so
//     nothing of the first send can run after the second. A round trip
//     that timed out may still be queued on the node (CLIENT PAUSE, a
//     stalled node): it is not sent again, and the attempt stops as
//     before.
//   - Every command in the round trip can run twice (again): reads, and
//     writes that set a state rather than change one (RESTORE over an
//     UNLINK, ZADD, SADD, HSET and their removals). APPEND, RPUSH and the
//     MULTI that renames a chunked key into place are not, and a round
//     trip with one of them is never sent again.
//   - The node is the server it was when the copy first spoke to it: the
//     same run_id (no restart) and the same master_replid (no failover,
//     no resync from another primary). A restarted or failed-over target
//     may have lost what the copy wrote before; a source may have lost
//     writes the tracker saw. Either ends the attempt, as before.
//
// A round trip sent again may have run partly the first time, so the
// replies of its UNLINKs no longer say whether the key was there before:
// the copy's count of the target's keys is then recounted before it is
// recorded (Copier.Recount).
//
// The copy goes on sending for redoFor after the first send, not for a
// number of tries: on a busy node a new connection and the identity read
// take longer, and a node that closes connections often cuts more of the
// tries.
const (
	redoFor   = 5 * time.Second        // how long, from the loss of its first send, a round trip is sent again
	redoFirst = 50 * time.Millisecond  // the pause before the first of them, doubled after each
	redoMax   = 800 * time.Millisecond // the longest pause
)

// again names the commands a copy's round trip may send twice.
var again = map[string]bool{
	// reads
	"DUMP": true, "PTTL": true, "MEMORY": true, "TYPE": true, "EXISTS": true,
	"SCAN": true, "ZSCAN": true, "HSCAN": true, "SSCAN": true,
	"ZRANGE": true, "ZMSCORE": true, "HMGET": true, "SMISMEMBER": true, "LRANGE": true, "GETRANGE": true,
	"ZCARD": true, "HLEN": true, "SCARD": true, "LLEN": true, "STRLEN": true,
	// writes that set a state: the second send finds it set
	"UNLINK": true, "RESTORE": true, "ZADD": true, "ZREM": true, "HSET": true, "HDEL": true,
	"SADD": true, "SREM": true, "PERSIST": true, "PEXPIRE": true,
}

// mayRedo reports whether a round trip of the commands named may be sent
// twice.
func mayRedo(names []string) bool {
	for _, name := range names {
		if !again[strings.ToUpper(name)] {
			return false
		}
	}
	return true
}

// lost reports whether a round trip's results say its connection was
// lost before it was answered (not timed out, not refused by the node).
func lost(rs []valkey.ValkeyResult) error {
	for _, r := range rs {
		err := r.Error()
		if err == nil {
			continue
		}
		if _, reply := valkey.IsValkeyErr(err); reply {
			continue
		}
		if ConnectionLost(err) {
			return err
		}
		return nil // a timeout, a cancelled context: the first send's fate is not known
	}
	return nil
}

// ConnectionLost reports whether err says a connection to a node was lost
// or could not be opened, the node running nothing of it after: closed
// by the node (an EOF, a reset, a broken pipe), a refused dial, a client
// closing. Not a timeout: a command that timed out may still run.
func ConnectionLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, valkey.ErrClosing)
}

// SameServers checks that the source and the target are still the servers
// the copy first spoke to (their identity, read then): a target restarted
// or failed over since may have lost what the copy wrote, however its
// replicas confirm what it has now, and a source may have lost writes the
// tracker saw. The mover asks before a hold and again under it, before
// it records the copy as done. A node whose identity could not be read
// when the copy began (INFO refused) is not checked.
func (c *Copier) SameServers(ctx context.Context) error {
	for _, n := range []*table.Node{c.Src, c.Dst} {
		if err := c.St.sameServer(ctx, n); err != nil {
			return fmt.Errorf("%w: %w: what the copy wrote there may be lost", table.ErrMove, err)
		}
	}
	return nil
}

// errUnread is sameServer's error when the node's identity cannot be read
// now.
var errUnread = errors.New("cannot read what server it is")

// sameServer reports whether n is the server the copy first spoke to: nil
// when it is, or when its identity was not known then; errUnread when it
// cannot be read now; else what changed.
func (s *copyStats) sameServer(ctx context.Context, n *table.Node) error {
	s.Mu.Lock()
	want := s.ident[n.Name]
	s.Mu.Unlock()
	if want == "" {
		return nil
	}
	id, err := identity(ctx, n)
	if err != nil {
		return fmt.Errorf("%s: %w (%v)", n.Name, errUnread, err)
	}
	if id != want {
		return fmt.Errorf("%s is not the server the copy began on (restarted or failed over: run_id and replication id %s, then %s)", n.Name, want, id)
	}
	return nil
}

// identity is what says a node is still the server the copy began on:
// its run_id and its replication id.
func identity(ctx context.Context, n *table.Node) (string, error) {
	info, err := n.C.Do(ctx, n.C.B().Info().Section("server", "replication").Build()).ToString()
	if err != nil {
		return "", err
	}
	var run, repl string
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			run = v
		} else if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			repl = v
		}
	}
	if run == "" || repl == "" {
		return "", fmt.Errorf("INFO on %s gave no run_id or master_replid", n.Name)
	}
	return run + " " + repl, nil
}

// know reads n's identity the first time the copy speaks to it, and
// reports whether it is known: a round trip to a node whose identity
// could not be read then is never sent again. A read whose connection was
// lost is tried again (as a resend is: the node may be closing its
// clients' connections right then), before the copy's first round trip
// to the node: an identity read after it could be a later server's.
func (s *copyStats) know(ctx context.Context, n *table.Node) bool {
	s.Mu.Lock()
	id, done := s.ident[n.Name]
	s.Mu.Unlock()
	if done {
		return id != ""
	}
	id, err := identity(ctx, n)
	if err != nil && ConnectionLost(err) {
		for range retries(ctx, time.Now()) {
			if id, err = identity(ctx, n); err == nil || !ConnectionLost(err) {
				break
			}
		}
	}
	if err != nil {
		id = ""
	}
	s.Mu.Lock()
	if old, done := s.ident[n.Name]; done {
		id = old
	} else {
		s.ident[n.Name] = id
	}
	s.Mu.Unlock()
	return id != ""
}

// retries yields once after each pause of a resend (redoFirst, doubled
// up to redoMax) while less than redoFor has passed since t0, and ctx
// lives.
func retries(ctx context.Context, t0 time.Time) iter.Seq[struct{}] {
	return func(yield func(struct{}) bool) {
		for pause := redoFirst; time.Since(t0) < redoFor; pause = min(2*pause, redoMax) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			if !yield(struct{}{}) {
				return
			}
		}
	}
}

// redo sends cmds (pinned, of a round trip that may run twice, to a node
// whose identity is known) again after their connection to n was lost
// (first: the error), while n is the same server; it returns the last
// results, and whether it sent them again.
func (s *copyStats) redo(ctx context.Context, n *table.Node, cmds []valkey.Completed, rs []valkey.ValkeyResult, first error) (_ []valkey.ValkeyResult, redone bool) {
	t0 := time.Now()
	defer func() {
		if first != nil && ctx.Err() == nil && time.Since(t0) >= redoFor {
			s.note("the connection to %s was lost again and again for %v (last: %v): the round trip is not sent again", n.Name, time.Since(t0).Round(time.Millisecond), first)
		}
	}()
	for range retries(ctx, t0) {
		if err := s.sameServer(ctx, n); errors.Is(err, errUnread) {
			continue // not back yet
		} else if err != nil {
			// Said once: the copy's pipelines all meet it.
			s.noteOnce(fmt.Sprintf("%v: the lost round trip is not sent again", err))
			return rs, redone
		}
		rs, redone = n.C.DoMulti(ctx, cmds...), true
		s.Mu.Lock()
		s.Redone++
		s.Mu.Unlock()
		s.note("lost the connection to %s (%v): sent the round trip again on a new one (same server)", n.Name, first)
		if first = lost(rs); first == nil {
			break
		}
	}
	return rs, redone
}

// Tell makes the copy tell say when it sends a round trip again.
func (c *Copier) Tell(say func(string, ...any)) {
	c.St.Mu.Lock()
	c.St.say = say
	c.St.Mu.Unlock()
}

// Recount counts the queue's keys on the target again (RecountTarget)
// when a round trip that wrote them was sent again since the last count:
// the copy's count of the target's keys is exact again.
func (c *Copier) Recount(ctx context.Context) error {
	c.Inv.Mu.Lock()
	unsure := c.Inv.Unsure
	c.Inv.Mu.Unlock()
	if !unsure {
		return nil
	}
	return c.RecountTarget(ctx)
}

// noteOnce is note for a message the copy says once, however many of its
// round trips meet the same fact.
func (s *copyStats) noteOnce(msg string) {
	s.Mu.Lock()
	if s.said[msg] {
		s.Mu.Unlock()
		return
	}
	if s.said == nil {
		s.said = map[string]bool{}
	}
	s.said[msg] = true
	s.Mu.Unlock()
	s.note("%s", msg)
}

// note tells the mover's log, when it listens (Copier.Tell).
func (s *copyStats) note(format string, args ...any) {
	s.Mu.Lock()
	say := s.say
	s.Mu.Unlock()
	if say != nil {
		say(format, args...)
	}
}
