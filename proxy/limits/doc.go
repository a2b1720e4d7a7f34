// Package limits holds the data path's limits, as values the proxy's
// sessions are given or keep: the memory budget of bytes held for clients
// (budget.go: Budget, whose input waits for room in order while replies,
// transactions and subscribers take what fits or nothing); the table of
// failed authentications per source address against password guessing
// (authlimit.go: AuthTable, which says how long each failure's reply
// waits: nothing for the first FreeAuthFailures of an address, then a
// delay doubling per failure up to a ceiling, an address's delayed replies
// one after the other, the count halving every minute without a failure,
// at most 4096 addresses); and one client's fair share of the shared
// upstream connections (share.go: Share, which says how many of its
// commands a part may hold and whether, and why, the client is isolated
// on connections of its own).
//
// It must not: know about sessions, connections or replies (what a
// session does when the budget is short, a guess must wait or a client is
// isolated, and the texts clients get, are package session's: budget.go,
// authlimit.go, share.go), sleep or wait anywhere but in Budget.Take, or
// import another package of the proxy.
package limits
