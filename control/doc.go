// Package control is the mover of queues between nodes (`emqproxy queue
// move`): it changes the control table of moved queues (control/table),
// kept on the nodes themselves, copying the queue's keys (control/keycopy)
// while it follows their changes (control/tail).
//
// A move's packages, each importing only those after it (TestLayers keeps
// the order):
//
//   - control (this one): the mover's steps (begin, copy while served,
//     hold, flip), the move's record and its fence, --resume, --abort,
//     whether a failure may be resumed (MayResume), queue status;
//   - control/keycopy: the copy of a queue's keys and its verification;
//   - control/tail: what changes on the source while the copy runs;
//   - control/table: the control table on the nodes, which the proxies read
//     (it lists every key under {emqproxy}).
//
// control/leftovers (`emqproxy queue leftovers`) imports control/table only.
//
// Decisions:
//
//   - The table holds only queues that were moved (or are moving); every
//     other queue goes where the configuration's routes say. A proxy reads
//     the table of every node it writes to and, queue by queue, the entry
//     with the highest epoch wins: the mover writes the target's entry
//     before the source's, so a proxy never sees the flip half done.
//   - A move's epochs are above every epoch of every node, so an entry
//     left over from an older move of the same queue never wins. The
//     mover reads every node's table, and refuses while one cannot be
//     read: the entry that decides a queue's owner may be on that node
//     alone (a hold, a release, an abort are written on the source only).
//   - On a master set with ack_replicas, every table write of the mover
//     (the hold, a release, the copy's record, the flip on each node, an
//     abort) is confirmed on the replicas (table.Node.Confirm) before anything
//     relies on it. A hold not confirmed is released and the move stops;
//     a release or an abort not confirmed stops the mover with what a
//     failover would bring back (--resume or --abort again).
//   - Every write of a move after its first is fenced (fence.go): one
//     WATCH/MULTI/EXEC on the node written checks that the move's record
//     still carries the mover's token at the step it expects, and that
//     the queue's entry there is older than the one written. --resume and
//     --abort take a move over by writing a new token, so a mover that
//     stalled (stopped, paused) stops at its next write instead of acting
//     on a move that is no longer its own. A proxy never applies a node's
//     table older than one it read from that node; a move's epochs are
//     above every epoch a proxy registered on a node applied.
//   - A proxy renews its lease and reads the node's table in one MULTI: a
//     mover that marked a queue held and then lists the proxies either finds
//     the proxy registered (and waits for its acknowledgement or the expiry
//     of its lease) or the proxy's renewal saw the held entry.
//   - Owners are upstream names of the shared configuration: every proxy
//     and the mover read one file.
//   - An entry that does not parse, whose epoch is past its table's (the
//     mover writes an entry with its epoch in one transaction), or whose
//     queue is empty or has braces is skipped (table.Table.Skipped) and
//     reported by whoever reads it; it never holds another queue. No
//     client writes these keys through a proxy (proxy/plan/rule.go).
//   - The mover copies while the queue is served and holds it only for what
//     changed last. The changes are learnt from the source node itself,
//     which sees every writer: its replication stream, read as a replica
//     reads it (every write, member by member), or, where the node does
//     not allow that, keyspace notifications on the queue's hashtag (the
//     key of every write). A barrier message proves the record complete
//     up to a point, and a lost connection, a changed setting, a flush or
//     a restart restarts the tracking with a full copy, never a silent
//     miss (control/tail).
//   - --rate paces the bulk copy, the round that reads every key: it reads
//     what was there when it began. The job-core sets go first and are
//     patched from then on, every 200ms, while the rows are copied; a row
//     written since the round began is left to the next rounds, which copy
//     what changed unpaced, at the pace of the writes. A queue written
//     faster than --rate reads it therefore still converges, as long as the
//     target takes the writes faster than the clients make them.
//   - No command the mover sends carries a large value: keys past
//     keycopy.DefaultLargeKey are copied in chunks (a scan) into a
//     temporary key renamed into place; once there, a change known member
//     by member is patched at the cost of the change, any other is copied
//     or compared in chunks (control/keycopy).
//
// The packages speak to nodes with valkey-go, the project's client.
package control
