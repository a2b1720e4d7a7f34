// Package fence checks what an upstream node is before the proxy carries
// any client command to it (proxy.md, "Fences"; job-core.md, "Brands and
// the version key").
//
// CheckModule is the wire-6 fence for a module node: EMQ.VERSION must
// report wire echomq:6.0.0, module major 0 and exactly the fourteen
// job-core tokens (every token the pinned map uses among them), then
// {emq}:version must hold echomq:6.0.0; an absent key is branded with
// EMQ.INSTALL only when the caller asks. CheckScripts is the wire-4 check
// for a scripts node against the legacy brand. Inspect says what a node is
// without writing anything; Install sends the explicit EMQ.INSTALL.
// RunCheck and RunInstall are the bodies of `emqproxy fence check ADDR` and
// `emqproxy fence install ADDR`.
//
// The package speaks through the small Conn interface (FromValkey adapts a
// valkey-go client), so the proxy can run the fence on its own upstream
// connections. It writes nothing but the brand, and only on request; it
// keeps no state, does no retrying and no logging: callers decide. Decode
// turns a reply's RESP bytes (package resp parses them) into the Reply the
// checks read, for the proxy's own connections.
package fence
