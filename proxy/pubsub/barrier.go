package pubsub

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/emqproxy/emqproxy/proxy/upstream"
)

// The session's side of a subscriber's connection: sending the client's
// commands, the barrier that orders the proxy's own replies among the
// server's, and the end of the bridge.

// Send writes the client's commands to the upstream connection.
func (sub *Subscriber) Send(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_ = sub.nc.SetWriteDeadline(time.Now().Add(sub.U.Options().Timeout))
	if _, err := sub.nc.Write(b); err != nil {
		sub.c.Met.UpstreamError(sub.U.Name(), "lost")
		return fmt.Errorf("%w: %w", upstream.ErrLost, err)
	}
	return nil
}

// Check sends a barrier and waits for it: subscribed reports whether the
// upstream connection is still in subscribe mode. Every reply before the
// barrier has been handed to the client writer when it returns. With stop
// (or when not subscribed) the relay has stopped.
func (sub *Subscriber) Check(stop bool) (subscribed bool, err error) {
	sub.stopAfter.Store(stop)
	sub.barrierOut.Store(true)
	if err := sub.Send(sub.ping); err != nil {
		return false, err
	}
	select {
	case subscribed = <-sub.barrier:
		return subscribed, nil
	case <-sub.Ended:
		select { // the barrier's outcome is sent before the relay ends
		case subscribed = <-sub.barrier:
			return subscribed, nil
		default:
		}
		return false, sub.Failure()
	}
}

// FinishWith sends out, stops the relay after every reply so far, waits
// until the client has them, and writes reply after them.
func (sub *Subscriber) FinishWith(out *[]byte, reply []byte) error {
	if err := sub.Send(*out); err != nil {
		return err
	}
	*out = (*out)[:0]
	if _, err := sub.Check(true); err != nil {
		return err
	}
	sub.drain()
	if sub.werr != nil {
		return sub.werr
	}
	if len(reply) == 0 {
		return nil // silenced by CLIENT REPLY
	}
	c := sub.c
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.WriteTimeout))
	_, err := c.Conn.Write(reply)
	return err
}

// Failure is the session's error once the relay ended on its own, and
// what it means for the client: over the limit, or the upstream is gone.
func (sub *Subscriber) Failure() error {
	<-sub.Ended
	c := sub.c
	switch {
	case errors.Is(sub.err, errSubscriberBytes):
		c.Met.Reject("subscriber_bytes")
		c.Log.Warn("closing a subscriber over the reply bytes limit", zap.Int("limit", sub.max))
	case errors.Is(sub.err, errSubscriberBudget):
		c.Met.Reject(ReasonMemoryBudget)
		c.Log.Warn("closing a subscriber: its messages do not fit in the memory budget", zap.Int64("budget", c.Mem.Limit()))
	case errors.Is(sub.err, errSubscriberGone):
	default:
		c.Met.UpstreamError(sub.U.Name(), "lost")
		c.Log.Warn("subscriber upstream connection lost", zap.Error(sub.err))
		sub.w.StopRelays()
		sub.w.drain() // the client gets what the server sent, then the close
	}
	return ErrClose
}

// Stop ends the bridge: closes the upstream connection and stops the
// writer, dropping what it still holds when abort is set (the client is
// being closed).
func (sub *Subscriber) Stop(abort bool) {
	sub.StopRelays()
	if abort {
		_ = sub.c.Conn.Close()
	}
	sub.drain()
	mem := sub.c.Mem // what the relays and the writer still hold
	mem.Give(sub.acct.Held)
	sub.acct.Held = 0
	for _, l := range sub.legs {
		mem.Give(l.acct.Held)
		l.acct.Held = 0
	}
	sub.mu.Lock()
	mem.Give(sub.pendHeld)
	sub.pendHeld = 0
	sub.mu.Unlock()
}

// SendChecked sends out, then a barrier, and reports whether the
// connection is still subscribed (see Check).
func (sub *Subscriber) SendChecked(out *[]byte) (subscribed bool, err error) {
	if err := sub.Send(*out); err != nil {
		return false, err
	}
	*out = (*out)[:0]
	return sub.Check(false)
}

// silenced reports whether the relay drops fr while muted: a reply, not a
// push. Over RESP2 (subscribe mode) the pushes are the messages and the
// subscribe confirmations, arrays of 3 or 4; the replies are PING's (an
// array of 2, or +PONG once no longer subscribed) and errors.
func (sub *Subscriber) silenced(fr []byte) bool {
	if sub.RESP3 {
		return fr[0] != '>'
	}
	return !(len(fr) > 4 && fr[0] == '*' && (fr[1] == '3' || fr[1] == '4') && fr[2] == '\r')
}

// StopRelays closes the bridge's connections (its first and every leg) and
// waits until their relays stopped.
func (sub *Subscriber) StopRelays() {
	sub.U.Disown(sub.nc)
	for _, l := range sub.legs {
		l.U.Disown(l.nc)
	}
	<-sub.Ended
	for _, l := range sub.legs {
		<-l.Ended
	}
}

// LegFailure is the session's error once a leg's relay ended on its own.
func (sub *Subscriber) LegFailure() error {
	for _, l := range sub.legs {
		select {
		case <-l.Ended:
			return l.Failure()
		default:
		}
	}
	return ErrClose
}
