// Package leftovers lists the keys of queues on nodes that do not own them,
// and removes them when asked (`emqproxy queue leftovers`): the keys a move
// left behind, on its source (a move finished without --delete-source, a
// deletion that failed) or on its target (a copy given up and not deleted,
// an abort that could not delete it), and any other key of a queue written
// where the queue is not served.
//
// A queue's owner is the one the proxies apply: the merged control table's
// entry when the queue was moved, else the configuration's route. Every
// upstream's table is read, and an unreachable upstream refuses the whole
// listing, for the reason the mover gives (table.NeedAll): the entry that
// decides a queue's owner may be on that node alone, and deciding without
// it could call the owner's own keys leftovers.
//
// A queue is never touched while a move of it is in progress (a record
// {emqproxy}:move:<queue> or a line of {emqproxy}:moves on any node), while
// its merged entry is held, while any node's entry for it is skipped (it
// does not parse: the owner is not known), or while its owner is not an
// upstream of the configuration. Those are listed as skipped, with why.
//
// Removing re-reads the tables and the records of the queue right before
// it deletes, and deletes in batches (UNLINK, 512 keys a command). What
// remains is a window between that re-read and the deletion in which a
// move of the queue could start and copy its first keys to the node:
// run it when no move is being started (the campaign runs it after its
// moves ended).
//
// It reads the nodes' control tables (package control/table) and imports
// none of the mover's packages.
package leftovers
