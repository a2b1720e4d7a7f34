package upstream

import "github.com/emqproxy/emqproxy/proxy/pipe"

// The connections an upstream holds are package pipe's.
type (
	// Pipe is a pipelined connection to the upstream (pipe.Pipe).
	Pipe = pipe.Pipe
	// OutRef is a large command sent from the client's buffer (pipe.OutRef).
	OutRef = pipe.OutRef
	// Batch is one session's commands on a Pipe (pipe.Batch).
	Batch = pipe.Batch
)

// What the session uses of package pipe through this package.
var (
	NewBatch      = pipe.NewBatch
	Encode        = pipe.Encode
	ErrIdleClosed = pipe.ErrIdleClosed
)

// Sizes of package pipe's the session uses through this package.
const (
	RefMin       = pipe.RefMin
	KeptBatchBuf = pipe.KeptBatchBuf
)
