package session

import (
	"time"

	"github.com/emqproxy/emqproxy/proxy/plan"
)

// The plan (package plan) decides every command a session reads, in every
// mode, and nowhere else; this file is the session's side of it: the view
// a round decides under, the inputs the plan is given, and what only the
// network or time can tell: the keys COMMAND GETKEYS gives (decide), a
// control state that changed while a command was admitted (plan), a held
// queue's wait (waitHeld). The delay a failed authentication earns is
// waited by the caller of decide (authlimit.go's authDelay).
//
// After the plan, a local answer's bytes are composed from what only the
// proxy holds (session.go's localReply: the server's HELLO reply with the
// session's id, CLIENT LIST of its sessions); the decision itself is not
// changed.
//
// A round decides under one view: the policy, the routes, the control state
// and the fences, loaded once at its start (loadView); only a control state
// that changes while a command is being admitted makes the session load the
// state and the routes again (admitted commands must count in the newest
// state).

// loadView takes the view for a round: the control state before the routes
// (the control loop stores the routes first), and the fences into the
// decision state.
func (s *session) loadView() {
	if c := s.srv.Ctl; c != nil {
		s.v.Ctl = c.Current()
		s.v.Loop = c
	}
	s.v.Routes = s.srv.Routes.Load()
	s.v.Pol = s.srv.Policy.Load()
	s.v.Tables = s.srv.Keys
	s.st.Fenced = s.srv.fenced()
	s.st.NoSub = s.v.Routes.Default().NoSub() // the keyless commands' upstream's answer to the unsubscribe family (upstream/unsub.go)
	s.st.SetInfo = s.srv.Keys.SetInfo()
}

// decide plans one command, asking the server for its keys when the plan
// says it needs them (the one round trip the plan itself never makes).
func (s *session) decide(args [][]byte, sp *plan.Step) {
	s.plan(args, sp)
	if sp.NeedKeys {
		sp.Keys, sp.Asked = s.v.Routes.Default().GetKeys(s.id, args), true // upstream/getkeys.go
		s.plan(args, sp)
	}
}

// plan runs the plan on one command into sp, under the view, the session's
// binding and its protocol state, and notes the control state an admitted
// command counts in (hold.go's release uncounts it).
func (s *session) plan(args [][]byte, sp *plan.Step) {
	in := plan.Input{Args: args, State: &s.st, View: &s.v, Auth: s, Bufs: &s.bufs,
		Bind: plan.Binding{Tx: &s.tx.Route}}
	if s.pinned != nil {
		in.Bind.Pin = s.pinnedUp
	}
	if s.sub != nil {
		in.Bind.Leg = s.sub.WatchUp
	}
	for {
		plan.Decide(&in, sp)
		if sp.Admitted != nil {
			s.adm.states = append(s.adm.states, admitted{st: sp.Admitted, slots: sp.Slots})
		}
		if !sp.Stale {
			return
		}
		// The control state changed while the command was admitted: plan
		// it under the new one (and the routes stored before it).
		s.v.Ctl = s.srv.Ctl.Current()
		s.v.Routes = s.srv.Routes.Load()
	}
}

// waitHeld waits for the held queue of sp (hold.go) and plans the command
// again until it may be sent or the hold is over; then it is planned once
// more as having waited it out (plan.Step.WaitedOut), and the plan refuses
// it with TRYAGAIN. flush first sends what the session built and gets its replies,
// so nothing admitted before the command stays in flight while it waits.
func (s *session) waitHeld(args [][]byte, sp *plan.Step, flush func() error) error {
	c := s.srv.Ctl
	began := time.Now()
	hold, poll := c.HoldLimits()
	deadline := began.Add(hold)
	defer c.Holding()()
	if err := flush(); err != nil {
		return err
	}
	s.release()
	for sp.Wait {
		if now := time.Now(); !now.Before(deadline) {
			// Planned once more as waited out: refused (TRYAGAIN), or
			// admitted under a state that came in at the last moment.
			sp.WaitedOut = true
		} else {
			t := time.NewTimer(min(deadline.Sub(now), poll/5+time.Millisecond))
			select {
			case <-s.v.Ctl.Changed():
			case <-t.C:
			case <-s.srv.Ctx.Done():
			}
			t.Stop()
		}
		s.v.Ctl = c.Current()
		s.v.Routes = s.srv.Routes.Load()
		s.decide(args, sp)
	}
	return nil
}
