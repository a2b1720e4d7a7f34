package table

import "errors"

// ErrMove is wrapped by every refusal and failure of a move.
var ErrMove = errors.New("queue move")

// NeedAll says why a move needs every upstream.
const NeedAll = "a queue's owner is decided by the control tables of every upstream, " +
	"and the entry that decides it may be on that one alone: try again when it is back"
