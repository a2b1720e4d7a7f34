package jobmix

import "errors"

var (
	// ErrConfig is wrapped by every invalid Config.
	ErrConfig = errors.New("jobmix: invalid config")
	// ErrMix is wrapped when a reply breaks the mix (a claim found nothing,
	// a complete did not complete, an error reply).
	ErrMix = errors.New("jobmix: unexpected reply")
)
