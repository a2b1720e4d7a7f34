package upstream

import (
	"context"
	"errors"
	"testing"

	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

func TestRoleCheckIntegration(t *testing.T) { node.EachServer(t, testRoleCheck) }

// testRoleCheck runs the role check of a new connection on a primary and
// on its replica.
func testRoleCheck(t *testing.T, srv node.Server) {
	p := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path})
	r := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path, ReplicaOf: p.Addr})
	for _, tc := range []struct {
		n    *node.Node
		want error
	}{{p, nil}, {r, ErrNotPrimary}} {
		d := dialer{opts: Options{Address: tc.n.Addr, DialTimeout: testTimeout}.WithDefaults()}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		nc, br, _, err := d.open(ctx, tc.n.Addr, 2)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		err = checkRole(ctx, &SetupConn{Conn: nc, RR: resp.NewReader(br)}, tc.n.Addr)
		cancel()
		_ = nc.Close()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: role check %v, want %v", tc.n.Addr, err, tc.want)
		}
	}
}
