// Package clienterr words what the proxy itself tells a client: the error
// replies it makes rather than relays (a refusal of the plan, an
// upstream's failure, a limit of its own, the server's wording of a
// refusal the proxy decides in its place).
//
// Such an error is an *Error: its Kind (the error code a client's library
// reads: ERR, TRYAGAIN, UPSTREAM, CROSSROUTE, EMQREFUSED, FENCE, or the
// proxy's own "ERR emqproxy:") and its detail, with the Go error it
// reports, if any, as its cause for errors.Is and errors.As. The packages
// of the data path describe what they refuse or what failed as such
// values; Reply is the one function that turns one into the RESP error
// line the client receives. Replies that do not change (a fixed refusal)
// are made once, at start, by the same function. The framer's protocol
// errors are package resp's (byte for byte as the server frames a
// client's input), the replies rewrite decides are rewrite's.
//
// It must not: decide what is refused (the plan's, rewrite's), relay a
// server's error reply (those reach the client as the server sent them),
// or import any other package of the data path: every package of it may
// import this one (proxy/layers_test.go keeps it last).
package clienterr
