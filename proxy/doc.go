// Package proxy is the data path of emqproxy: it accepts client
// connections, frames their commands under the server's protocol limits,
// decides each command with rewrite.Decide, forwards what is forwarded on
// its own pipelined upstream connections, and writes every reply back to
// the client byte for byte as the server sent it, in command order.
//
// It owns: the client input framer and its limits (guard.go), the session
// loop that alone knows about order (session.go, transaction.go), the
// pipelined upstream connections that coalesce many clients' batches into
// one write and frame replies without decoding them (pipeline.go, resp.go,
// upstream.go, dial.go) with their lazily set deadlines (deadline.go), the
// periodic re-run of the fence on a live upstream (probe.go), a Sentinel
// upstream's primary followed across failovers (failover.go) and the
// replicas' confirmation of writes (ack.go), routing by queue across several named upstreams with their roles (route.go,
// route_session.go, segment.go) by the servers' own key positions
// (keys.go), the shared-connection rule those tables give (rule.go: which
// commands may travel on a shared connection, the protected keys, the
// node's credentials and other databases), subscribe mode bridged over a
// connection of the client's own (subscribe.go, subscribe_relay.go), the
// replies it makes from what only it knows: its own clients for CLIENT
// LIST and CLIENT INFO (clientlist.go) and the upstream's answer to the
// unsubscribe family outside subscribe mode (unsubscribe.go), a client's
// CLIENT REPLY mode (clientreply.go), the process-wide memory budget for
// what clients make it hold (budget.go) with large commands sent from the
// client's read buffer without a copy (largecmd.go), the limits on failed
// authentications per source address and on the time to authenticate
// (authlimit.go), the server lifecycle (server.go), the
// audit records (audit.go), the capture of chosen queues' commands for a
// replay (capture.go) and the data-path metrics (metrics.go).
//
// It must not decide anything itself (that is rewrite's job) beyond what
// only the servers' tables can tell (the rule, queue-time errors), must never
// decode and re-encode a reply, must never resend a command that may have
// reached an upstream (a command that fails in flight gets an explicit
// error), and must not log payloads, values or secrets. Configuration
// parsing and the fence checks live elsewhere: they reach the proxy through
// Options and the OnConnect hook.
package proxy
