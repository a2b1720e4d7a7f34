// Package keycopy copies one queue's keys from a move's source to its
// target and verifies them, paced by a byte rate.
//
// Small keys go by DUMP/RESTORE, pipelined in batches (copy.go). No command
// carries a large value: keys past DefaultLargeKey are copied in chunks (a
// scan) into a temporary key renamed into place (bigkey.go, zset.go); once
// there, a change control/tail knows member by member is patched at the
// cost of the change (patch.go), any other is copied or compared in
// chunks. A token bucket paces the copy while the queue is served, in bytes
// of values a second (throttle.go); the copy measures what it cost the nodes (round trips,
// the SLOWLOG: slowlog.go) and reports its progress, stored beside the
// move's record (progress.go).
//
// It imports control/table and control/tail; package control decides
// when to copy what.
package keycopy
