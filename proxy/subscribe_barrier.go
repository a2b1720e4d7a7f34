package proxy

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// The session's side of a subscriber's connection (subscribe.go): sending
// the client's commands, the barrier that orders the proxy's own replies
// among the server's, and the end of the bridge.

// send writes the client's commands to the upstream connection.
func (sub *subscriber) send(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_ = sub.nc.SetWriteDeadline(time.Now().Add(sub.u.Options().Timeout))
	if _, err := sub.nc.Write(b); err != nil {
		sub.s.srv.met.UpstreamError(sub.u.Name(), "lost")
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return nil
}

// check sends a barrier and waits for it: subscribed reports whether the
// upstream connection is still in subscribe mode. Every reply before the
// barrier has been handed to the client writer when it returns. With stop
// (or when not subscribed) the relay has stopped.
func (sub *subscriber) check(stop bool) (subscribed bool, err error) {
	sub.stopAfter.Store(stop)
	sub.barrierOut.Store(true)
	if err := sub.send(sub.ping); err != nil {
		return false, err
	}
	select {
	case subscribed = <-sub.barrier:
		return subscribed, nil
	case <-sub.ended:
		select { // the barrier's outcome is sent before the relay ends
		case subscribed = <-sub.barrier:
			return subscribed, nil
		default:
		}
		return false, sub.failure()
	}
}

// finishWith sends out, stops the relay after every reply so far, waits
// until the client has them, and writes reply after them.
func (sub *subscriber) finishWith(out *[]byte, reply []byte) error {
	if err := sub.send(*out); err != nil {
		return err
	}
	*out = (*out)[:0]
	if _, err := sub.check(true); err != nil {
		return err
	}
	sub.drain()
	if sub.werr != nil {
		return sub.werr
	}
	if len(reply) == 0 {
		return nil // silenced by CLIENT REPLY
	}
	s := sub.s
	_ = s.nc.SetWriteDeadline(time.Now().Add(s.srv.opts.WriteTimeout))
	_, err := s.nc.Write(reply)
	return err
}

// failure is the session's error once the relay ended on its own, and
// what it means for the client: over the limit, or the upstream is gone.
func (sub *subscriber) failure() error {
	<-sub.ended
	s := sub.s
	switch {
	case errors.Is(sub.err, errSubscriberBytes):
		s.srv.met.rejected.WithLabelValues("subscriber_bytes").Inc()
		s.log.Warn("closing a subscriber over the reply bytes limit", zap.Int("limit", sub.max))
	case errors.Is(sub.err, errSubscriberBudget):
		s.srv.met.rejected.WithLabelValues(reasonMemoryBudget).Inc()
		s.log.Warn("closing a subscriber: its messages do not fit in the memory budget", zap.Int64("budget", s.srv.mem.Limit()))
	case errors.Is(sub.err, errSubscriberGone):
	default:
		sub.s.srv.met.UpstreamError(sub.u.Name(), "lost")
		s.log.Warn("subscriber upstream connection lost", zap.Error(sub.err))
		sub.w.stopRelays()
		sub.w.drain() // the client gets what the server sent, then the close
	}
	return errClose
}

// stop ends the bridge: closes the upstream connection and stops the
// writer, dropping what it still holds when abort is set (the client is
// being closed).
func (sub *subscriber) stop(abort bool) {
	sub.stopRelays()
	if abort {
		_ = sub.s.nc.Close()
	}
	sub.drain()
	mem := sub.s.srv.mem // what the relays and the writer still hold
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
