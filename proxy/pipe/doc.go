// Package pipe is one pipelined connection to a server and the batches it
// carries, and nothing of who the server is: a Pipe writes the batches of
// many sessions together (combining them into one write, with one WAIT
// for those that wait for replicas), frames each reply with resp.Reader
// and hands every batch its replies as exact bytes, in the order the
// batches were sent; a batch whose connection breaks gets explicit errors
// for the replies it lacks (lost in flight, or never written), and nothing
// is ever sent twice. A Batch is one session's commands on one connection:
// their encoded bytes (Encode: the client's bytes, a rewritten head over
// the client's tail, a large command written from the client's read
// buffer without a copy) and, once done, their replies.
//
// Dialing, booting and fencing a connection, following a Sentinel
// primary, the replicas' confirmation of writes and which connection a
// session gets are package upstream's, which makes every Pipe (New) and
// reads what it needs of one through Addr, Dead, Failed and CheckIdle. The
// package imports resp, proxy/deadline and rewrite (a Decision to
// encode).
package pipe
