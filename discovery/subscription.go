package discovery

import (
	"context"
	"time"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/zap"
)

// subscription keeps a +switch-master subscription on one sentinel: a
// dedicated connection, remade with a backoff when it breaks. Every
// confirmed (re)subscription asks for an attempt, since a message may
// have been missed while it was down.
func (r *Resolver) subscription(sentinel string) {
	defer r.wg.Done()
	wait := retryMin
	for r.ctx.Err() == nil {
		subscribed, err := r.subscribeOnce(sentinel)
		r.setSubscribed(sentinel, false)
		if r.ctx.Err() != nil {
			return
		}
		if subscribed {
			wait = retryMin
			r.log.Warn("sentinel subscription lost", zap.String("sentinel", sentinel), zap.Error(err))
		} else {
			r.log.Debug("sentinel subscription failed", zap.String("sentinel", sentinel), zap.Error(err))
		}
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, retryMax)
	}
}

// subscribeOnce subscribes on a new connection and returns when the
// connection ends or the resolver closes. subscribed reports whether the
// subscription was confirmed.
func (r *Resolver) subscribeOnce(sentinel string) (subscribed bool, err error) {
	c, err := valkey.NewClient(r.opts.sentinelClientOption(sentinel))
	if err != nil {
		return false, err
	}
	defer c.Close()
	dc, release := c.Dedicate()
	defer release()
	confirmed := make(chan struct{}, 1)
	ended := dc.SetPubSubHooks(valkey.PubSubHooks{
		OnMessage: func(m valkey.PubSubMessage) {
			if m.Channel != switchChannel {
				return
			}
			addr, ok := parseSwitch(r.opts.Master, m.Message)
			if !ok {
				return
			}
			r.log.Info("sentinel announced a new primary", zap.String("sentinel", sentinel), zap.String("primary", addr))
			r.mu.Lock()
			r.hint = addr
			r.mu.Unlock()
			r.Kick()
		},
		OnSubscription: func(s valkey.PubSubSubscription) {
			if s.Kind == "subscribe" && s.Channel == switchChannel {
				select {
				case confirmed <- struct{}{}:
				default:
				}
			}
		},
	})
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	err = dc.Do(ctx, dc.B().Subscribe().Channel(switchChannel).Build()).Error()
	cancel()
	if err != nil {
		return false, err
	}
	for {
		select {
		case <-confirmed:
			subscribed = true
			r.setSubscribed(sentinel, true)
			r.Kick()
		case err := <-ended:
			return subscribed, err
		case <-r.ctx.Done():
			return subscribed, nil
		}
	}
}

func (r *Resolver) setSubscribed(sentinel string, ok bool) {
	r.mu.Lock()
	r.subscribed[sentinel] = ok
	r.mu.Unlock()
}
