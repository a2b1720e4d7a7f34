// Package capture records the job-core calls a proxy forwards for chosen
// queues, and reads them back for a replay (verify.Replay).
//
// A capture is a directory of files, each named
// capture-<UTC start>-<file number>.emqcap and written append-only. A file
// is:
//
//	magic    8 bytes  "EMQCAP\r\n"
//	version  2 bytes  big-endian format version (Version, 1)
//	frames   ...      the header frame, then one frame per record
//
// and every frame is
//
//	length   4 bytes  big-endian length n of the body (n > 0)
//	crc      4 bytes  big-endian CRC-32C (Castagnoli) of the body
//	body     n bytes
//
// The header frame's body is JSON (Header: the map digest, whether values
// were redacted, when the capture started, the file's number). A record's
// body is binary (Record.MarshalBinary): a kind byte (1, a call), then
// uvarints and length-prefixed byte strings: sequence number, time (unix
// µs), latency (µs), client connection id, flags (1 redacted, 2 the reply
// was kept as a shape only), queue, script name, token, the arguments as
// the client sent them, and the reply as the upstream sent it (RESP).
//
// Decisions:
//
//   - Append-only with a length and a checksum per frame, so a crash leaves
//     at most one incomplete frame at the end of the last file. The reader
//     skips an incomplete last frame (and a zero-filled tail, which some
//     file systems leave after a crash) and reports where it was cut; any
//     other damage is an error naming the file, the offset and the record.
//     A file that does not start with the magic is foreign, and a version
//     this package does not know is refused: the reader never guesses.
//   - The writer never blocks the data path. A producer of many records
//     (a proxy session) copies each into a buffer of its own (Stream,
//     stream.go) and publishes them with an atomic store; the writer takes
//     them from every stream in batches. Add puts one record on a bounded
//     queue and returns at once. Either way memory is bounded (BufferBytes
//     over the streams' buffers, QueueLen records on the queue) and a
//     record that finds no room is dropped and counted, never waited for.
//     One goroutine redacts, encodes and writes (buffered, large writes),
//     rotating to a new file past FileBytes.
//   - MaxBytes is one disk budget over the directory, not per capture: the
//     capture files already in it when a writer opens (earlier captures,
//     of this process or an earlier run) count, Open refuses (ErrBudget)
//     when they leave no room, and past it the writer stops for good, logs
//     that once, and counts every later record as dropped: captures never
//     fill a disk, however often one is started. Removing old capture
//     files gives the budget back.
//   - Redaction (Options.Redact) keeps the structure a replay needs (names,
//     keys, ids, counts, the job row's field names and state) and replaces
//     everything else the client or the server put in a recorded command
//     or its reply (payloads, error texts, any value of a plain command on
//     the queue's keys, RESP2 or RESP3) with a stand-in of the same length,
//     keyed by a secret of the capture's own that is never written
//     (redact.go has the rules). The same value gets the same stand-in
//     within a capture, so a replay of redacted calls still matches: the
//     ENQUEUE that wrote a payload and the CLAIM that returned it agree. A
//     reply whose contents became stand-ins is flagged FlagShapeOnly: its
//     shape (types, lengths, integers, statuses, error codes) is all a
//     replay compares of it.
//   - Sequence numbers are given when the proxy decides a command, so the
//     order of one queue's records is the order the proxy forwarded them.
//
// The package does no network I/O and knows nothing of the proxy.
package capture
