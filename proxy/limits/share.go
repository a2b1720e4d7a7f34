package limits

import "time"

// A client's fair share of a shared upstream connection.
//
// The batches of many clients go on one shared connection and are answered
// in the order they were written: while one client's commands are in
// flight, every batch written after them waits for their replies. One
// client that pipelines a thousand GETs of a 1 MiB value would hold the
// connection for a gigabyte of replies, and the node, which sees one
// client, would close the connection, and every client on it, over its
// output-buffer limit. So each client gets a share:
//
//  1. At most Options.ShareCommands of one client's commands are in flight
//     on a shared connection at once. A longer batch is sent in parts of
//     that many: the next part is written once the replies of the one
//     before are read, so other clients' batches go between them. A
//     client's parts start at ShareStart commands and double, up to
//     ShareCommands, while their replies stay small (on average under
//     ShareBytes/ShareCommands a command): the size of a reply is known
//     only once it is read, so a client whose replies are large has cost
//     the shared connection one small part before it is isolated, not
//     ShareCommands of its replies. A client over its reply cap
//     (Options.MaxReplyBytes) is closed at the end of the part that passed
//     it: the rest of its batch is never sent.
//     On its own connection (below) a client's commands go in parts of
//     ShareCommands too, so that past its reply cap the rest of its batch
//     is not sent there either.
//  2. A client that is heavy for a shared connection is isolated: its
//     commands go on a connection of its own to each upstream (opened,
//     fenced and registered like a WATCH pin: package upstream's
//     IsolatedPipe; a reply timeout like a shared connection's), counted as
//     emqproxy_client_isolated_total{reason} and logged once. Heavy is:
//     - command_bytes: a command (or a transaction) larger than
//     Options.ShareBytes, known before it is sent;
//     - reply_bytes: one part whose replies passed Options.ShareBytes;
//     - pipeline: SharePipelineParts parts in a row that each filled
//     Options.ShareCommands, or a transaction longer than that;
//     - slow_reader: a write of replies to the client that took longer
//     than slowWrite (the client reads more slowly than it asks).
//     What a client still costs a shared connection before it is isolated
//     is therefore one part: ShareStart commands and their replies, or
//     ShareCommands once its replies have shown themselves small.
//  3. It comes back to the shared connections when Options.IsolateFor has
//     passed since it last did any of the above on its own connection (a
//     batch longer than ShareCommands, replies or a command over
//     ShareBytes, a slow write): its own connections are closed at the
//     start of its next round, when nothing of it is in flight.
//
// An isolated client's connections are the node's clients like a direct
// client's: the node's output-buffer limit closes that connection alone.
// WATCH pins, blocking commands and subscribe mode keep their own
// connections as before; the share concerns the shared connections only.

//
// Share decides; the session acts: it sends a part and flushes when Share
// says the part is full, opens and closes the client's own connections,
// counts and logs an isolation (package session's share.go).

// ShareStart is the size of a client's first parts on a shared connection
// (the window grows from it: see above). Eight covers the batches of most
// clients, so the window's growth costs them nothing.
const ShareStart = 8

// SharePipelineParts is how many full parts in a row make a client deep
// pipelining (isolated for "pipeline").
const SharePipelineParts = 4

// SlowWrite is the longest a write of replies to the client may block
// before the client counts as a slow reader. A client that reads promptly
// takes a 64 MiB reply in tens of milliseconds on loopback.
const SlowWrite = 250 * time.Millisecond

// Isolation reasons, the label of emqproxy_client_isolated_total.
const (
	IsoCommandBytes = "command_bytes"
	IsoReplyBytes   = "reply_bytes"
	IsoPipeline     = "pipeline"
	IsoSlowReader   = "slow_reader"
	IsoTracking     = "tracking" // RESP2 client-side caching: the client's connections track
)

// IsoReasons are the isolation reasons, for the metric's initial series.
var IsoReasons = []string{IsoCommandBytes, IsoReplyBytes, IsoPipeline, IsoSlowReader, IsoTracking}

// Share is one client's use of the shared connections (see above): the
// size its parts may have now, and whether it is isolated, until when.
// Commands and Bytes are Options.ShareCommands and ShareBytes; the rest
// starts at zero: a client that shares, its window at ShareStart.
type Share struct {
	Commands int
	Bytes    int64

	window int       // commands a part may hold now; 0: ShareStart
	full   int       // parts in a row that filled the window
	until  time.Time // isolated until then; zero: shares
}

// Isolated reports whether the client has connections of its own.
func (sh *Share) Isolated() bool { return !sh.until.IsZero() }

// Isolate isolates the client until now+d, or keeps it isolated that
// much longer; it reports whether the client shared until now.
func (sh *Share) Isolate(now time.Time, d time.Duration) (first bool) {
	first = !sh.Isolated()
	sh.until = now.Add(d)
	sh.full = 0
	return first
}

// Due reports whether an isolated client may come back: nothing heavy
// since its isolation was last renewed, for as long as it was given.
func (sh *Share) Due(now time.Time) bool { return sh.Isolated() && !now.Before(sh.until) }

// Rejoin ends the isolation; it reports whether the client was isolated.
func (sh *Share) Rejoin() bool {
	was := sh.Isolated()
	sh.until = time.Time{}
	return was
}

// Window is how many of the client's commands a part may hold now.
func (sh *Share) Window() int {
	if sh.window == 0 {
		return min(ShareStart, sh.Commands)
	}
	return sh.window
}

// Heavy is the reason a forwarded command of size bytes (count commands:
// a transaction's whole unit) isolates the client, or "" when it does not:
// a command over Bytes, or more than Commands at once.
func (sh *Share) Heavy(size, count int) string {
	switch {
	case int64(size) > sh.Bytes:
		return IsoCommandBytes
	case count > sh.Commands:
		return IsoPipeline
	}
	return ""
}

// Full notes a part sent because it held the window's worth of commands.
func (sh *Share) Full() { sh.full++ }

// After judges one part once its replies are in: n commands whose
// replies took replies bytes (over: past the client's reply cap), on the
// client's own connection or a shared one. It returns the reason the
// client is isolated, or kept so, or "": on a shared connection, replies
// past Bytes, or SharePipelineParts full parts in a row; on its own, a
// part still heavy. A full part of small replies doubles the window, a
// part that is not full starts the count of full ones again.
func (sh *Share) After(n int, replies int64, over, own bool) string {
	heavy := over || replies > sh.Bytes
	switch {
	case own:
		if heavy || n >= sh.Commands {
			return IsoReplyBytes // still heavy: it stays
		}
	case heavy:
		return IsoReplyBytes
	case sh.full >= SharePipelineParts:
		return IsoPipeline
	case n < sh.Window():
		sh.full = 0
	case replies*int64(sh.Commands) <= sh.Bytes*int64(n):
		sh.window = min(2*sh.Window(), sh.Commands) // small replies: a larger part
	}
	return ""
}

// SlowReader is the reason a write of replies to the client that took
// took isolates it, or "".
func SlowReader(took time.Duration) string {
	if took > SlowWrite {
		return IsoSlowReader
	}
	return ""
}
