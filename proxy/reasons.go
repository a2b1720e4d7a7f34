package proxy

import "github.com/emqproxy/emqproxy/proxy/plan"

// The refusal reasons the plan decides (audit log, metrics).
const (
	// ReasonCrossRoute: a command, or a command queued in MULTI, whose keys
	// route to two upstreams.
	ReasonCrossRoute = plan.ReasonCrossRoute
	// ReasonHeld: a command whose queue stayed held past ControlOptions.Hold.
	ReasonHeld = plan.ReasonHeld
	// ReasonControlKey: a write to a control-table key.
	ReasonControlKey = plan.ReasonControlKey
	// ReasonUnknownCommand and ReasonNoMulti: the server's queue-time
	// refusals inside MULTI; arity errors use rewrite.ReasonArity.
	ReasonUnknownCommand = plan.ReasonUnknownCommand
	ReasonNoMulti        = plan.ReasonNoMulti
)
