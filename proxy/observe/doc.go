// Package observe records what the data path did with each command, for
// the audit log and for a traffic capture, and nothing else: it sends no
// command, changes no decision and no reply, and waits on nothing.
//
// It has three parts:
//
//   - the audit log (audit.go): one JSON record per rewrite and per
//     refusal (and per passed command when asked), with the fields
//     documented there, written on the audit logger after the client's
//     replies of a batch are written;
//   - the capture (capture.go): the commands of chosen queues in the
//     client's original form, with their replies, written by package
//     capture's writer for a replay. Capture is the server's (one running
//     capture at a time, its counters and metrics);
//   - the data path's Prometheus collectors (metrics.go: Metrics), which
//     the session counts into and upstream reports through its Metrics
//     interface.
//
// A client session holds one Session: its audit records of the round,
// the child loggers with its fixed fields, and its side of a running
// capture (its capture.Stream and the records waiting for their replies).
// The session gives it everything as values: the command's arguments and
// rewrite.Decision, the slot of its reply, the reply bytes once they are
// in, the upstream's name, the user, the map's digest and the batch's
// start. Package observe imports nothing of the session's package, and
// calls nothing back.
//
// The session's order of calls for one batch (package session, its
// observe.go; Reply is called by package segment's Emit as it moves each
// reply to the output, and by the session itself for a bridged client):
//
//	Command     once per planned command: its audit record's index, or -1
//	Forwarded   after a forwarded command's reply slot is added: the capture
//	            record, when a running capture wants its queue
//	Reply       when a command's reply is known (or Relayed, on the bridge)
//	Awaiting, Finish, Publish
//	            once the segment's replies are in: the capture records get
//	            their replies and go to the capture's writer
//	WriteAudits after the replies are written to the client
//	End         when the session ends
//
// A bridged RESP3 client's command is captured with Bridged instead of
// Forwarded: the relay, on its own goroutine, finishes the record with
// the server's reply (Captured.Reply).
//
// Nothing here adds an allocation per command in normal service: the
// records reuse the session's slices, the arguments of an audit record
// are read in place (the records are written before the session reads
// again), and with no capture running the capture costs one atomic load.
package observe
