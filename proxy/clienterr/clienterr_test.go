package clienterr

import (
	"errors"
	"fmt"
	"testing"
)

func TestReply(t *testing.T) {
	lost := errors.New("connection lost")
	for _, c := range []struct {
		err  error
		want string
	}{
		{New(Err, "max number of clients reached"), "-ERR max number of clients reached\r\n"},
		{New(Proxy, "transaction too large"), "-ERR emqproxy: transaction too large\r\n"},
		{New(TryAgain, "queue q is moving"), "-TRYAGAIN queue q is moving\r\n"},
		{Wrap(Upstream, "node unavailable: a\r\nb", lost), "-UPSTREAM node unavailable: a  b\r\n"},
		{New(CrossRoute, "x"), "-CROSSROUTE x\r\n"},
		{New(Refused, "y"), "-EMQREFUSED y\r\n"},
		{New(Fence, "z"), "-FENCE z\r\n"},
		{fmt.Errorf("session: %w", New(TryAgain, "wrapped")), "-TRYAGAIN wrapped\r\n"},
		{errors.New("plain\nerror"), "-ERR plain error\r\n"},
	} {
		if got := string(Reply(c.err)); got != c.want {
			t.Errorf("Reply(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestErrorIsAndText(t *testing.T) {
	lost := errors.New("connection lost")
	err := fmt.Errorf("send: %w", Wrap(Upstream, "node unavailable: connection lost", lost))
	if !errors.Is(err, lost) {
		t.Errorf("%v does not wrap its cause", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Kind != Upstream || e.Kind.String() != "UPSTREAM" {
		t.Errorf("errors.As(%v) = %v %v", err, e, e != nil && e.Kind == Upstream)
	}
	if got := New(Proxy, "limit").Error(); got != "ERR emqproxy: limit" {
		t.Errorf("Error() = %q", got)
	}
}
