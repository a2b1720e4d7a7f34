// Package limits holds the data path's process-wide limits, as values the
// proxy's sessions are given: the memory budget of bytes held for clients
// (budget.go: Budget, whose input waits for room in order while replies,
// transactions and subscribers take what fits or nothing), and the table
// of failed authentications per source address against password guessing
// (authlimit.go: AuthTable, which says how long each failure's reply
// waits: nothing for the first FreeAuthFailures of an address, then a
// delay doubling per failure up to a ceiling, an address's delayed replies
// one after the other, the count halving every minute without a failure,
// at most 4096 addresses).
//
// It must not: know about sessions, connections or replies (what a
// session does when the budget is short or a guess must wait, and the
// texts clients get, are package proxy's: budget.go, authlimit.go), sleep
// or wait anywhere but in Budget.Take, or import package proxy.
package limits
