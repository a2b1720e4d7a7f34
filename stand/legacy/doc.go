// Package legacy is the stand's wire-4 client: it behaves like the EchoMQ
// wire-4 connector, so tests and benchmarks drive a scripts node, or the
// proxy in front of a module node, exactly the way production does.
//
// What it does on the wire:
//
//   - On every connect and reconnect of every connection it opens, the boot
//     commands (AUTH, SELECT, CLIENT SETNAME, as configured) and then the
//     wire-4 fence, before the connection carries anything else:
//     GET {emq}:version; when absent, SET {emq}:version <brand> NX and GET
//     again; any value other than its own brand is a *FenceError, which
//     stops the client (every later call returns it) until Reconnect.
//   - One line per script call: EVALSHA (EVALSHA_RO for the reads stats and
//     peek), the sha of the script body, numkeys, the keys, the values. A
//     NOSCRIPT reply makes it send SCRIPT LOAD <body> once and the same line
//     again.
//   - Claim reads the pause flag (EXISTS emq:{q}:paused) in a round trip of
//     its own first, and answers empty without sending the script when the
//     queue is paused. EXISTS because the job core defines paused as "the
//     key exists" for the host; it is one plain read of the flag either way.
//   - Batch sends several lines in one round trip (valkey-go DoMulti); Tx
//     wraps them in MULTI/EXEC on a dedicated connection. Claims in either
//     keep their own pause read, one round trip before the lines. Lines that
//     get NOSCRIPT are sent again after one SCRIPT LOAD per script: in a
//     second pipeline, or in a second MULTI/EXEC of their own (the server
//     has already run the other lines of the first one).
//
// How "every reconnect" is achieved with valkey-go: valkey-go reconnects by
// itself and has no hook that runs commands on a new connection, but every
// connection it opens goes through ClientOption.DialCtxFn. The client's dial
// function opens the TCP connection, runs the boot commands and the fence
// over it with a minimal RESP2 exchange, and only then hands it to
// valkey-go. So the fence runs on the first connect, on valkey-go's own
// transparent reconnects (a killed connection, a restarted server), on the
// connections of the dedicated pool used by Tx, and on Reconnect, which
// replaces the valkey-go client. The credentials, database and name are
// therefore not given to valkey-go; it only adds HELLO 2 after the fence
// (it always sends it on a RESP2 connection; the reply changes nothing).
// valkey-go may open a connection it never uses for commands (on RESP2 it
// keeps a separate one for pub/sub, opened when a dedicated connection is
// returned to its pool); that one passes the fence too.
// The connection speaks RESP2 (AlwaysRESP2), sends no CLIENT SETINFO, uses
// no client-side cache, never retries a command (DisableRetry), and uses a
// single pipelining connection, as the connector does.
//
// Every reply the client saw can be recorded (Options.Record), normalized as
// a Value, so the end-to-end suite can compare a scripts node with a
// proxied module node.
//
// The package must not be used by the proxy itself, holds no copy of the
// scripts (their bodies come from package scripts, their shas are the SHA-1
// of those bodies) and never resends a line except after NOSCRIPT.
package legacy
