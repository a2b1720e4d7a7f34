// Package table is the control table of moved queues as the nodes keep it:
// its keys, the encoding and the merge of its entries, the proxies'
// registrations and leases, and the Node through which a proxy or the mover
// reads and writes it.
//
// Every node (module or scripts) holds, under the reserved hashtag
// {emqproxy} so that all of it lives in one slot:
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
//	{emqproxy}:syncdelay      on a move's source, while a join has its
//	                          repl-diskless-sync-delay at 0: the value
//	                          to put back, the node's run and the client
//
// This package reads and writes the first four (a proxy's side: Node.Renew,
// Node.Ack, Node.ReadTable, Merge) and names the others; the move's record
// is written by package control, its progress by control/keycopy, the
// notification setting and the sync delay's save by control/tail. It also names the nodes' client
// connections the mover looks for (DataClientName, MoverClientName) and
// holds ErrMove, which every package of a move wraps.
//
// An entry that does not parse, whose epoch is past its table's, or whose
// queue is empty or has braces is skipped (Table.Skipped) and reported by
// whoever reads it; it never holds another queue. Of the tables of several
// nodes, queue by queue, the entry with the highest epoch wins (Merge).
//
// The proxy (package proxy) imports this package and no other under
// control/; it imports none of them.
package table
