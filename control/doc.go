// Package control is the control table of moved queues, kept on the nodes
// themselves, and the mover that changes it (`emqproxy queue move`).
//
// Every node (module or scripts) holds, under the reserved hashtag
// {emqproxy} (rewrite.ControlKeyPrefix, which the proxy's plan also uses to
// refuse clients' writes to these keys) so that all of it lives in one slot:
//
//	{emqproxy}:epoch          the node's table epoch (an integer)
//	{emqproxy}:queues         hash: queue -> "<epoch> <state> <owner>"
//	                          state "held" (commands for the queue wait) or
//	                          "owned" (the queue is served by upstream <owner>)
//	{emqproxy}:proxies        hash: proxy id -> its registration (JSON: the
//	                          epoch it applied, when it renewed, its lease)
//	{emqproxy}:lease:<id>     a proxy's lease on the node: a key with an expiry
//	{emqproxy}:move:<queue>   a move in progress (hash: from, to, epoch, step,
//	                          token and by: the fence)
//	{emqproxy}:moves          on a move's source: the queues with a record
//	{emqproxy}:progress:<q>   a running move's progress (JSON, expiring)
//	{emqproxy}:notify         on a move's source: the node's own
//	                          notify-keyspace-events ("saved") and the moves
//	                          that turned the notifications on
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
//     abort) is confirmed on the replicas (Node.Confirm) before anything
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
//     queue is empty or has braces is skipped (Table.Skipped) and
//     reported by whoever reads it; it never holds another queue. No
//     client writes these keys through a proxy (proxy/plan/rule.go).
//   - The mover copies while the queue is served and holds it only for what
//     changed last. The changes are learnt from the source node itself,
//     which sees every writer: its replication stream, read as a replica
//     reads it (replica.go, replwire.go: every write, member by member),
//     or, where the node does not allow that, keyspace notifications on
//     the queue's hashtag (notify.go: the key of every write). A barrier
//     message proves the record complete up to a point, and a lost
//     connection, a changed setting, a flush or a restart restarts the
//     tracking with a full copy, never a silent miss (track.go,
//     streamtrack.go, change.go).
//   - No command the mover sends carries a large value: keys past
//     DefaultLargeKey are copied in chunks (a scan) into a temporary key
//     renamed into place (bigkey.go); once there, a change known member
//     by member is patched at the cost of the change (patch.go), any
//     other is copied or compared in chunks.
//
// The package speaks to nodes with valkey-go, the project's client.
package control
