// Package discovery finds an upstream's primary through Sentinel and
// follows it across failovers.
//
// A Resolver is given a master set's name and the sentinels' addresses
// (Options). It asks the sentinels for the primary (SENTINEL
// GET-MASTER-ADDR-BY-NAME), in the order the Sentinel clients guidelines
// give: the first sentinel that answers is used and moved to the front of
// the list. It checks ROLE on the candidate before reporting it: a node
// that does not answer, or answers with another role than master (a
// replica not promoted yet, a node demoted by hand), is refused, and the
// resolver asks again, with a short backoff, until a candidate passes. It
// subscribes to +switch-master on every configured sentinel and treats a
// message for its master as a candidate to check at once; because a
// message can be missed (a sentinel connection that was down at the
// time), it also asks again when a subscription is made or remade, every
// Options.Refresh, and whenever a caller reports a failed connection
// (ReportFailure) or asks for a fresh answer (Resolve).
//
// The caller reads the last confirmed primary (Primary), a channel closed
// when it changes (Watch), and plain counters for its metrics (Failovers,
// Refusals, Subscribed).
//
// What is written by hand, and why: valkey-go's own Sentinel support
// (ClientOption.Sentinel) hands out a client whose connections it owns; it
// exposes neither the primary's address nor the moment of a switch. The
// proxy's data path opens its own framed connections (replies pass byte
// for byte) and must know the address, fail what is in flight on a switch
// and re-ask on a connection failure, so the resolution loop and the
// subscription handling are this package's. Every exchange with a
// sentinel or a candidate still goes through a valkey-go client. Parts
// that speak to the primary as clients (the control table, the queue
// mover) use valkey-go's Sentinel support directly, through
// Options.ClientOption.
//
// The package must not touch the data path: it opens connections only to
// the sentinels and, for the ROLE check, to candidates; it sends a data
// node nothing but ROLE, and keeps one connection, to the primary it last
// confirmed, for the next check.
package discovery
