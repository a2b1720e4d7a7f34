package proxy

import (
	"github.com/emqproxy/emqproxy/capture"
	"github.com/emqproxy/emqproxy/proxy/observe"
)

// CaptureOptions configures a capture (package observe).
type CaptureOptions = observe.CaptureOptions

// ErrCapture is wrapped by StartCapture's and StopCapture's errors.
var ErrCapture = observe.ErrCapture

// StartCapture starts capturing the queues of o into o.Dir. One capture
// runs at a time.
func (s *Server) StartCapture(o CaptureOptions) error {
	digest := ""
	if p := s.policy.Load(); p != nil && p.Map != nil {
		digest = p.Map.Digest
	}
	return s.cap.Start(o, digest, s.log)
}

// StopCapture stops the running capture, writes what it has queued and
// returns what it did; running is false when none was running.
func (s *Server) StopCapture() (st capture.Stats, running bool, err error) {
	return s.cap.Stop(s.log)
}

// CaptureStats returns what the running capture has done so far; running
// is false when none runs.
func (s *Server) CaptureStats() (st capture.Stats, running bool) {
	return s.cap.Stats()
}
