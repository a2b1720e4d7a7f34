// Package cmdtable holds the servers' own command tables, as the data path
// reads them: per command (and per subcommand of a container command) its
// key specs and the key positions they give (table.go: Entry, Spec), its
// name, arity and no-multi flag for the queue-time checks, and the class of
// the shared-connection rule its flags and ACL categories put it in, with
// the server's special cases and the exceptions clients rely on
// (class.go: Class, Traits).
//
// Load reads one upstream's COMMAND reply into a Table; a Store merges the
// tables of every upstream (first one wins) and answers lookups on the
// data path without allocating. Entries are never modified once merged.
//
// It must not: do I/O other than Load's one COMMAND on the connection it
// is given, decide what happens to a command (the rule's order, its
// argument checks and its refusals are package plan's, rule.go), or import
// a package of the data path above it (proxy/layers_test.go). The dialer
// (package upstream, dial.go) loads the table into the shared Store when
// an upstream's first connection passes its fence; for an entry with Ask
// set the plan asks for the command's keys (plan.Step.NeedKeys) and the
// session gets them from the server with COMMAND GETKEYS
// (upstream/getkeys.go).
package cmdtable
