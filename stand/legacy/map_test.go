package legacy_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/legacy"
	"github.com/emqproxy/emqproxy/stand/node"
)

// TestShasMatchThePinnedMap: the client sends exactly the shas stand/map.yaml
// pins, and refuses to start with a map whose pin does not match a body.
func TestShasMatchThePinnedMap(t *testing.T) { node.EachServer(t, testShasMatchThePinnedMap) }

func testShasMatchThePinnedMap(t *testing.T, srv node.Server) {
	path := filepath.Join(node.RepoRoot(), "stand", "map.yaml")
	m, err := shamap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	c, _ := dial(t, legacy.Options{Addr: n.Addr, Map: m})
	for _, name := range legacy.ScriptNames {
		pin, ok := m.ByName(name)
		if !ok {
			t.Fatalf("%s is not pinned", name)
		}
		wantEq(t, name+" sha", c.SHA(name), pin.SHA)
	}

	// A map whose enqueue pin is another script's sha.
	other := strings.Replace(mustRead(t, path), c.SHA("enqueue"), c.SHA("stats")[:39]+"0", 1)
	bad, err := shamap.Parse([]byte(other))
	if err != nil {
		t.Fatal(err)
	}
	_, err = legacy.Dial(testCtx(t), legacy.Options{Addr: n.Addr, Map: bad})
	if !errors.Is(err, legacy.ErrScript) {
		t.Fatalf("dial with a wrong pin: %v, want ErrScript", err)
	}
}

// TestModuleNodeStopsTheClient: the wire-4 connector stops on the module's
// brand, so it never sends a script to a module node directly.
func TestModuleNodeStopsTheClient(t *testing.T) { node.EachServer(t, testModuleNodeStopsTheClient) }

func testModuleNodeStopsTheClient(t *testing.T, srv node.Server) {
	if _, err := node.BuildModule(); err != nil {
		t.Skipf("module not buildable here: %v", err)
	}
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Module})
	_, err := legacy.Dial(testCtx(t), legacy.Options{Addr: n.Addr})
	var fe *legacy.FenceError
	if !errors.As(err, &fe) || fe.Got != "echomq:6.0.0" {
		t.Fatalf("dial to a module node: %v, want {:version_fence, \"echomq:6.0.0\"}", err)
	}
}
