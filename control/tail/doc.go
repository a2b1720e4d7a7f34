// Package tail learns what changes in one queue's keys on a move's source
// while the copy runs, so that the mover copies again only what changed.
//
// The changes come from the source node itself, which sees every writer:
// its replication stream, read as a replica reads it (replica.go,
// replwire.go: every write, member by member), or, where the node does not
// allow that, keyspace notifications on the queue's hashtag (notify.go: the
// key of every write, with the node's own setting saved and given back by
// the last move that needed them). A barrier message proves the record
// complete up to a point, and a lost connection, a changed setting, a flush
// or a restart restarts the tracking with a full copy, never a silent miss
// (track.go, streamtrack.go; change.go is what is known of one key).
//
// Under control/ it imports control/table only (package resp writes its
// commands and reads the stream's lengths); control/keycopy applies what
// it records.
package tail
