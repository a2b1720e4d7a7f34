// Package clients is the proxy's own clients as the CLIENT commands see
// them: the Registry of a server's live sessions, what CLIENT LIST and
// CLIENT INFO show of each (a View its session publishes and any session
// reads), and the answers to CLIENT LIST, CLIENT KILL ID and CLIENT
// UNBLOCK across the registry.
//
// It knows a session only as a Client: its id, its View and how to close
// it. Package session implements Client, keeps each session's View up to
// date and asks this package for the answers; it must not import package
// session, whose sessions it lists.
package clients
