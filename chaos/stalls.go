package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Faults of stalled processes and clients (issue 46), and the removal of
// what the moves left behind (issue 47), run at the end of a campaign.

// stopAbort is FaultMoveStopped: a mover started with args is stopped
// (SIGSTOP) once it printed that it held q, the move is aborted with
// `--abort` from another process, and the mover is continued (SIGCONT) the
// fault's span later (the workers use the queue on its source meanwhile)
// and waited for. A mover that flips q after the abort answered (q's owner is
// no longer from) is a PhaseFlippedAfterAbort event: acknowledged jobs
// enqueued on the source after the abort would be lost.
func (n *nemesis) stopAbort(f Fault, q, from, d string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = withDeadline(ctx, args)
	cmd := exec.CommandContext(ctx, n.f.Bin, append([]string{"queue"}, append(args, "--config", n.f.MoverCfg)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return d, err
	}
	cmd.Stderr = cmd.Stdout
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return d, err
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out strings.Builder
	held := "held " + q + " on "
	heldSeen := false
	for !heldSeen {
		l, ok := <-lines
		if !ok {
			break
		}
		out.WriteString(l + "\n")
		heldSeen = strings.HasPrefix(l, held)
	}
	if !heldSeen {
		err := cmd.Wait()
		n.moverLog(began, args, out.String(), err)
		d = fmt.Sprintf("%s; the mover ended before it held the queue: %v: %s", d, err, lastLine(out.String()))
		d += n.finishMove(ctx, q)
		return d + "; owner now " + n.ownerOf(q), errNotMoved
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return d, err
	}
	out.WriteString("(SIGSTOP)\n")
	abortOut, abortErr := n.mover(ctx, "move", q, "--abort")
	if abortErr == nil {
		d += "; stopped after its hold, aborted: " + lastLine(abortOut)
	} else {
		d += fmt.Sprintf("; stopped after its hold, abort refused: %v: %s", abortErr, lastLine(abortOut))
	}
	// The workers go on with the queue on its source, as the abort said,
	// before the mover runs again.
	time.Sleep(f.For)
	d += fmt.Sprintf("; continued %v later", f.For.Round(time.Millisecond))
	out.WriteString("(SIGCONT)\n")
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		_ = cmd.Process.Kill()
	}
	for l := range lines {
		out.WriteString(l + "\n")
	}
	moverErr := cmd.Wait()
	n.moverLog(began, args, out.String(), moverErr)
	if moverErr == nil {
		d += "; the mover, continued, ended: " + lastLine(out.String())
	} else {
		d += fmt.Sprintf("; the mover, continued, ended with %v: %s", moverErr, lastLine(out.String()))
	}
	n.refreshOwners(ctx)
	now := n.ownerOf(q)
	if abortErr == nil && now != from {
		d += "; owner now " + now
		n.event(f, PhaseFlippedAfterAbort, fmt.Sprintf("queue %s: the mover stopped after its hold flipped it to %s after `--abort` answered (%s)", q, now, d))
		return d, fmt.Errorf("the aborted move flipped %s to %s", q, now)
	}
	// Whatever the continued mover did (the abort refused: it was past its
	// flip, or a node was down), a move of q left in progress is resumed or
	// aborted like a failed one, so that the lane's next move finds none.
	d += n.finishMove(ctx, q)
	d += "; owner now " + n.ownerOf(q)
	if abortErr != nil {
		return d, errNotMoved
	}
	return d, nil
}

// finishMove resumes, then aborts, a move of q still in progress (held, or
// a record at any step), and says what it did ("" when none was).
func (n *nemesis) finishMove(ctx context.Context, q string) string {
	if !slices.Contains(n.refreshOwners(ctx), q) {
		return ""
	}
	out, err := n.mover(ctx, "move", q, "--resume", "--delete-source")
	if err == nil {
		return "; the move left in progress resumed"
	}
	d := fmt.Sprintf("; the move left in progress: resume: %v: %s", err, lastLine(out))
	if out, err := n.mover(ctx, "move", q, "--abort"); err != nil {
		return d + fmt.Sprintf("; abort: %v: %s", err, lastLine(out))
	}
	return d + "; aborted"
}

// ownerOf is q's owner as the nemesis last read it.
func (n *nemesis) ownerOf(q string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.owner[q]
}

// blocked is FaultBlocked: a client sends BLPOP <key> 0 straight to a
// sidecar (no relay: the network faults do not cut it) and stays blocked
// while the move lane runs, then closes its connection. The key is of a
// campaign queue (Other even: a move of that queue gives the blocked
// command up, the client gets an error or its connection closed) or of no
// campaign queue (Other odd: nothing pushes to it, and it must stop no
// move). A reply with a value is an error of the fault: nobody pushes to
// the key.
func (n *nemesis) blocked(f Fault) (string, error) {
	sc := n.f.Sidecars[f.Target%len(n.f.Sidecars)]
	key := "{chaos-blocked}:l"
	if f.Other%2 == 0 {
		key = "emq:{" + n.queues[f.Target%len(n.queues)] + "}:chaos-blocked"
	}
	hold := 2*time.Second + 3*f.For
	d := fmt.Sprintf("sidecar %d: BLPOP %s 0 for %v", sc.N, key, hold.Round(time.Millisecond))
	n.event(f, "start", d)
	if !sc.Ready() {
		// Killed by the sidecar lane: the client waits for it, as one
		// reconnecting would.
		if err := sc.WaitReady(20 * time.Second); err != nil {
			return d + ": the sidecar is not ready", err
		}
	}
	conn, err := net.DialTimeout("tcp", sc.Listen, 2*time.Second)
	if err != nil {
		return d + ": not connected", err
	}
	defer conn.Close()
	movesBefore := n.moves.Load()
	if _, err := fmt.Fprintf(conn, "*3\r\n$5\r\nBLPOP\r\n$%d\r\n%s\r\n$1\r\n0\r\n", len(key), key); err != nil {
		return d + ": not sent", err
	}
	began := time.Now()
	_ = conn.SetReadDeadline(began.Add(hold))
	r := bufio.NewReader(conn)
	line, rerr := r.ReadString('\n')
	took := time.Since(began).Round(time.Millisecond)
	d += fmt.Sprintf("; %d move(s) started meanwhile", n.moves.Load()-movesBefore)
	var ne net.Error
	switch {
	case rerr != nil && errors.As(rerr, &ne) && ne.Timeout():
		return d + "; still blocked at the end, connection closed", nil
	case rerr != nil:
		return fmt.Sprintf("%s; connection closed after %v (%v)", d, took, rerr), nil
	case strings.HasPrefix(line, "-"):
		return fmt.Sprintf("%s; error after %v: %s", d, took, strings.TrimSpace(line)), nil
	case strings.HasPrefix(line, "*-1") || strings.HasPrefix(line, "_"):
		return fmt.Sprintf("%s; nil reply after %v", d, took), fmt.Errorf("BLPOP with timeout 0 answered nil after %v", took)
	default:
		return fmt.Sprintf("%s; reply after %v: %q", d, took, strings.TrimSpace(line)), fmt.Errorf("BLPOP of a key nobody pushes to answered %q", strings.TrimSpace(line))
	}
}

// leftovers runs `queue leftovers --remove` once every move ended, and
// returns its history event: what it found, removed and skipped.
func (n *nemesis) leftovers(ctx context.Context) Event {
	e := Event{Kind: KindLeftovers, Proc: "nemesis"}
	for attempt := 0; ; attempt++ {
		out, err := n.mover(ctx, "leftovers", "--remove")
		var keys, queues, nodes, removed, skipped int64
		summary := summaryLine(out, "leftovers: ")
		_, serr := fmt.Sscanf(summary, "leftovers: %d keys of %d queue(s) on %d upstream(s), removed %d, skipped %d queue(s)",
			&keys, &queues, &nodes, &removed, &skipped)
		if serr == nil {
			e.Counts = map[string]int64{"keys": keys, "queues": queues, "removed": removed, "skipped": skipped}
			e.Detail = summary
			if err != nil {
				e.Counts["errors"] = 1
				e.Detail = fmt.Sprintf("%s (%v)", e.Detail, err)
			}
			return e
		}
		if attempt == 4 {
			e.Counts = map[string]int64{"errors": 1}
			e.Detail = fmt.Sprintf("queue leftovers --remove: %v: %s", err, lastLine(out))
			return e
		}
		time.Sleep(time.Second)
	}
}

// summaryLine is the last line of out that starts with prefix ("" when none).
func summaryLine(out, prefix string) string {
	found := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			found = l
		}
	}
	return found
}
