// Package resp is the module's one reader and writer of RESP, the redis
// protocol (RESP2 and RESP3), at the bottom of it: it imports only the
// standard library, so the data path under proxy/, the capture, the
// rewrite's replies, the fence, the queue mover's replication tail and the
// test stand all frame, parse and write RESP the same way.
//
// It owns:
//   - ParseInt (intparse.go), the server's reading of a RESP integer
//     (string2ll), for every length line and every number it reads;
//   - the client input framer (guard.go: Framer, its Limits and the
//     protocol error replies, byte for byte as redis 7.0 frames and
//     answers a client's input);
//   - the reply reader (reply.go: Reader, which cuts one complete reply's
//     exact bytes off a connection's bufio.Reader, RESP2 and RESP3, under a
//     size cap and a memory Budget's Account; ReadReply, the same uncapped
//     and checked, for tools and tests);
//   - the parser of a complete reply in memory (value.go: Parse,
//     ParsePrefix, Value and its AppendRESP), off the data path: the
//     capture's redaction and replay, the fence's and the boot commands'
//     replies (fence.Decode turns a Value into the fence's Reply);
//   - the writers (append.go: AppendArray, AppendBulk, AppendInt,
//     AppendCommand and the others). redcon's appenders were all the
//     module still used of redcon (its server loop was replaced by the
//     framer, guard.go says why); the writers sit here beside the reader
//     so that one package owns both directions, and redcon is no longer a
//     requirement.
//
// It lives at the top of the module rather than under proxy/ because
// packages beside the data path use it too; the data path's packages
// (proxy/layers_test.go) reach it as the package below all of theirs.
//
// It must not: decode and re-encode a reply the data path forwards,
// allocate per command on the framing path, block on anything but the
// reader it was given, or know about sessions, upstreams or the budget's
// owner: the budget reaches it as the Budget interface, and whoever owns an
// Account gives its bytes back. It imports no package of the module.
package resp
