// Package proxy is the data path of emqproxy: it accepts client
// connections, frames their commands under the server's protocol limits,
// plans each command once (rewrite.Decide and what only the servers'
// tables and the proxy's routes can tell), forwards what is forwarded on
// its own pipelined upstream connections, and writes every reply back to
// the client byte for byte as the server sent it, in command order.
//
// It owns: the client's read buffer (input.go), framed by package resp;
// the session loop that alone knows about order (session.go,
// transaction.go, segment.go); the plan, the one place a command is
// decided in every session mode (plan.go), under a view of the
// policy, routes, control state and fences loaded once per read, with what
// it draws on: the queue-time errors (queuecheck.go), the shared-connection
// rule (rule.go: which commands may travel on a shared connection, the
// protected keys, the node's credentials and other databases), routing by
// queue across named upstreams with their roles (route.go,
// route_session.go) by the servers' own key positions (keys.go), and the
// control table's admission of moving queues (control.go, hold.go); the
// observer that reports every planned command alike (observe.go: metrics,
// audit records in audit.go, the capture of chosen queues in capture.go,
// the SCRIPT EXISTS patch, the SCRIPT LOAD fan-out); the connections a
// command goes on (forward.go): the pipelined shared ones that coalesce
// many clients' batches into one write and frame replies without decoding
// them with package resp (pipeline.go, pipeline_read.go, pipeline_idle.go,
// batch.go, upstream.go, dial.go) with their lazily set deadlines
// (deadline.go), and the connections of one client each, owned by their
// upstream through the one fence check (owned.go); the periodic re-run of
// the fence on a live upstream, which closes every connection of an
// upstream whose fence fails (probe.go); a Sentinel upstream's primary
// followed across failovers (failover.go) and the replicas' confirmation
// of writes (ack.go); subscribe mode over a connection
// of the client's own (subscribe.go, subscribe_barrier.go,
// subscribe_relay.go) and the RESP3 bridge of a subscribed or tracking
// client, one connection per upstream it uses (bridge.go, legs.go); the
// replies it makes from what only it knows: its own clients for CLIENT
// LIST and CLIENT INFO (clientlist.go) and the upstream's answer to the
// unsubscribe family outside subscribe mode (unsubscribe.go), a client's
// CLIENT REPLY mode (clientreply.go); the process-wide memory budget for
// what clients make it hold (budget.go) with large commands sent from the
// client's read buffer without a copy (largecmd.go); the limits on failed
// authentications per source address and on the time to authenticate
// (authlimit.go); the server lifecycle (server.go) and the data-path
// metrics (metrics.go).
//
// What to do with a command is rewrite's to say: the plan only amends that
// decision with what rewrite/, being pure, cannot know (the servers'
// command tables, the routes, the control table, the fences), and nothing
// after the plan changes it. The package must never decode and re-encode a
// reply (the patches of SCRIPT EXISTS and the HELLO id excepted, from the
// server's own bytes), must never resend a command that may have reached
// an upstream (a command that fails in flight gets an explicit error), and
// must not log payloads, values or secrets. Configuration parsing and the
// fence checks live elsewhere: they reach the proxy through Options and
// the OnConnect hook.
package proxy
