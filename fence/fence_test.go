package fence

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emqproxy/emqproxy/shamap"
	"github.com/emqproxy/emqproxy/stand/node"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func standMap(t *testing.T) *shamap.Map {
	t.Helper()
	m, err := shamap.Load(filepath.Join("..", "stand", "map.yaml"))
	if err != nil {
		t.Fatalf("stand map: %v", err)
	}
	return m
}

// moduleNode starts a module node, skipping (with the reason) when the
// module cannot be built on this machine.
func moduleNode(t *testing.T, opts node.Options) *node.Node {
	t.Helper()
	if _, err := node.BuildModule(); err != nil {
		t.Skipf("module not buildable here: %v", err)
	}
	opts.Role = node.Module
	return node.StartT(t, opts)
}

// keys returns every key of the node's database 0, sorted.
func keys(t *testing.T, c Conn) []string {
	t.Helper()
	r, err := c.Do(ctxT(t), "KEYS", "*")
	if err != nil || r.Type != '*' {
		t.Fatalf("KEYS: %v %+v", err, r)
	}
	var out []string
	for _, e := range r.Elems {
		out = append(out, e.Str)
	}
	slices.Sort(out)
	return out
}

func do(t *testing.T, c Conn, args ...string) Reply {
	t.Helper()
	r, err := c.Do(ctxT(t), args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

func TestModuleNodeIntegration(t *testing.T) { node.EachServer(t, testModuleNodeIntegration) }

func testModuleNodeIntegration(t *testing.T, srv node.Server) {
	n := moduleNode(t, node.Options{Server: srv.Path})
	c := FromValkey(n.Client(t))
	res, err := CheckModule(ctxT(t), c, standMap(t), false)
	if err != nil {
		t.Fatalf("CheckModule: %v", err)
	}
	if res.Kind != ModuleNode || res.Brand != ModuleBrand || res.Wire != ModuleBrand ||
		!strings.HasPrefix(res.ModuleVersion, "0.") || !slices.Equal(res.Tokens, shamap.Tokens) || res.Installed {
		t.Errorf("result = %+v", res)
	}
	ins, err := Inspect(ctxT(t), c)
	if err != nil || ins.Kind != ModuleNode {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	if got, err := Install(ctxT(t), c); err != nil || got != 0 {
		t.Errorf("Install on a branded node = %d, %v, want 0", got, err)
	}
}

func TestModuleNodeUnbrandedIntegration(t *testing.T) {
	node.EachServer(t, testModuleNodeUnbrandedIntegration)
}

func testModuleNodeUnbrandedIntegration(t *testing.T, srv node.Server) {
	n := moduleNode(t, node.Options{Server: srv.Path, NoBrand: true})
	c := FromValkey(n.Client(t))
	m := standMap(t)

	res, err := CheckModule(ctxT(t), c, m, false)
	if !errors.Is(err, ErrBrandAbsent) || res.Kind != Unbranded || !res.BrandAbsent {
		t.Fatalf("install off: %+v, %v", res, err)
	}
	if err.Error() != "fence: brand absent: {emq}:version is absent and install is off" {
		t.Errorf("text %q", err)
	}
	if k := keys(t, c); len(k) != 0 {
		t.Fatalf("install off wrote %v", k)
	}
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Unbranded || !ins.Module() {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}

	res, err = CheckModule(ctxT(t), c, m, true)
	if err != nil || res.Kind != ModuleNode || !res.Installed || res.Brand != ModuleBrand {
		t.Fatalf("install on: %+v, %v", res, err)
	}
	if k := keys(t, c); !slices.Equal(k, []string{VersionKey}) {
		t.Errorf("install wrote %v, want only %s", k, VersionKey)
	}
	if r := do(t, c, "GET", VersionKey); r.Str != ModuleBrand {
		t.Errorf("brand %+v", r)
	}
	// A second check finds it branded and installs nothing.
	res, err = CheckModule(ctxT(t), c, m, true)
	if err != nil || res.Installed {
		t.Errorf("second check: %+v, %v", res, err)
	}
}

func TestModuleNodeForeignBrandIntegration(t *testing.T) {
	node.EachServer(t, testModuleNodeForeignBrandIntegration)
}

func testModuleNodeForeignBrandIntegration(t *testing.T, srv node.Server) {
	n := moduleNode(t, node.Options{Server: srv.Path, NoBrand: true})
	c := FromValkey(n.Client(t))
	do(t, c, "SET", VersionKey, "echomq:4.0.0")
	for _, install := range []bool{false, true} {
		res, err := CheckModule(ctxT(t), c, standMap(t), install)
		if !errors.Is(err, ErrForeignBrand) || res.Kind != Foreign || res.Installed {
			t.Fatalf("install=%v: %+v, %v", install, res, err)
		}
		if want := `fence: foreign brand: {emq}:version is "echomq:4.0.0", want "echomq:6.0.0"`; err.Error() != want {
			t.Errorf("text %q, want %q", err, want)
		}
	}
	_, err := Install(ctxT(t), c)
	if !errors.Is(err, ErrInstall) || !strings.Contains(err.Error(), "EMQWIRE expected echomq:6.0.0 found echomq:4.0.0") {
		t.Errorf("Install over a foreign brand: %v", err)
	}
	if r := do(t, c, "GET", VersionKey); r.Str != "echomq:4.0.0" {
		t.Errorf("brand changed to %+v", r)
	}
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Foreign {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
}

func TestScriptsNodeIntegration(t *testing.T) { node.EachServer(t, testScriptsNodeIntegration) }

func testScriptsNodeIntegration(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	c := FromValkey(n.Client(t))

	res, err := CheckModule(ctxT(t), c, standMap(t), true)
	if !errors.Is(err, ErrNotModule) || res.Kind != NotModule {
		t.Fatalf("CheckModule on a scripts node: %+v, %v", res, err)
	}
	if !strings.Contains(err.Error(), "EMQ.VERSION: unknown command") {
		t.Errorf("text %q does not say what was found", err)
	}
	if r := do(t, c, "GET", VersionKey); r.Str != node.DefaultBrand {
		t.Errorf("brand changed to %+v", r)
	}
	res, err = CheckScripts(ctxT(t), c, node.DefaultBrand, false)
	if err != nil || res.Kind != ScriptsNode || res.Brand != node.DefaultBrand {
		t.Errorf("CheckScripts = %+v, %v", res, err)
	}
	_, err = CheckScripts(ctxT(t), c, "echomq:4.1.0", true)
	if !errors.Is(err, ErrForeignBrand) ||
		err.Error() != `fence: foreign brand: {emq}:version is "echomq:4.0.0", want "echomq:4.1.0"` {
		t.Errorf("CheckScripts with another brand: %v", err)
	}
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != ScriptsNode || ins.Module() {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	if _, err := Install(ctxT(t), c); !errors.Is(err, ErrInstall) {
		t.Errorf("Install on a scripts node: %v", err)
	}
}

func TestBareNodeIntegration(t *testing.T) { node.EachServer(t, testBareNodeIntegration) }

func testBareNodeIntegration(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	c := FromValkey(n.Client(t))

	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Unbranded || ins.Module() {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	if _, err := CheckModule(ctxT(t), c, nil, true); !errors.Is(err, ErrNotModule) {
		t.Errorf("CheckModule: %v", err)
	}
	res, err := CheckScripts(ctxT(t), c, "echomq:4.0.0", false)
	if !errors.Is(err, ErrBrandAbsent) || res.Kind != Unbranded {
		t.Fatalf("install off: %+v, %v", res, err)
	}
	if k := keys(t, c); len(k) != 0 {
		t.Fatalf("checks wrote %v", k)
	}
	res, err = CheckScripts(ctxT(t), c, "echomq:4.0.0", true)
	if err != nil || res.Kind != ScriptsNode || !res.Installed {
		t.Fatalf("install on: %+v, %v", res, err)
	}
	if k := keys(t, c); !slices.Equal(k, []string{VersionKey}) {
		t.Errorf("install wrote %v", k)
	}
}

func TestForeignNodesIntegration(t *testing.T) { node.EachServer(t, testForeignNodesIntegration) }

func testForeignNodesIntegration(t *testing.T, srv node.Server) {
	n := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts, Brand: "acme:1"})
	c := FromValkey(n.Client(t))
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Foreign || ins.Brand != "acme:1" {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	// The module's brand on a node without the module is foreign too.
	do(t, c, "SET", VersionKey, ModuleBrand)
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Foreign {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	// A key that is not a string.
	do(t, c, "DEL", VersionKey)
	do(t, c, "LPUSH", VersionKey, "x")
	if ins, err := Inspect(ctxT(t), c); err != nil || ins.Kind != Foreign {
		t.Errorf("Inspect = %+v, %v", ins, err)
	}
	_, err := CheckScripts(ctxT(t), c, "echomq:4.0.0", true)
	if !errors.Is(err, ErrBrandType) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("CheckScripts on a list: %v", err)
	}
}

func TestCheckVersion(t *testing.T) {
	good := Result{Wire: ModuleBrand, ModuleVersion: "0.1.0", Tokens: slices.Clone(shamap.Tokens)}
	m, err := shamap.Parse([]byte("legacy_brand: x\nscripts:\n" +
		"  - {name: a, sha: \"f44394af848b4027b5e544c86de2c76c938546d9\", verb: ENQUEUE, keys: 2, values: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*Result)
		want error
		text string
	}{
		{name: "good", edit: func(*Result) {}},
		{name: "wire", edit: func(r *Result) { r.Wire = "echomq:5.0.0" }, want: ErrWire,
			text: `fence: wrong wire: EMQ.VERSION wire is "echomq:5.0.0", want "echomq:6.0.0"`},
		{name: "major", edit: func(r *Result) { r.ModuleVersion = "1.0.0" }, want: ErrModuleMajor,
			text: `fence: wrong module major: module version is "1.0.0", want major 0`},
		{name: "missing token", edit: func(r *Result) { r.Tokens = r.Tokens[1:] }, want: ErrTokens},
		{name: "extra token", edit: func(r *Result) { r.Tokens = append(r.Tokens, "FLY") }, want: ErrTokens},
		{name: "repeated token", edit: func(r *Result) { r.Tokens = append(r.Tokens, "CLAIM") }, want: ErrTokens},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := good
			r.Tokens = slices.Clone(good.Tokens)
			c.edit(&r)
			err := checkVersion(r, m)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.text != "" && err.Error() != c.text {
				t.Errorf("text %q, want %q", err, c.text)
			}
		})
	}
}

func TestRunCheckIntegration(t *testing.T) { node.EachServer(t, testRunCheckIntegration) }

func testRunCheckIntegration(t *testing.T, srv node.Server) {
	scripts := node.StartT(t, node.Options{Server: srv.Path, Role: node.Scripts})
	var out bytes.Buffer
	if code := RunCheck(ctxT(t), &out, scripts.Addr, "", ""); code != ExitUnfenced {
		t.Errorf("scripts node: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "scripts node") || !strings.Contains(out.String(), "echomq:4.0.0") {
		t.Errorf("scripts node summary:\n%s", out.String())
	}

	gone := node.StartT(t, node.Options{Server: srv.Path, Role: node.Bare})
	addr := gone.Addr
	if err := gone.Stop(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := RunCheck(ctxT(t), &out, addr, "", ""); code != ExitError {
		t.Errorf("stopped node: exit %d\n%s", code, out.String())
	}

	mod := moduleNode(t, node.Options{Server: srv.Path, NoBrand: true, Password: "pw"})
	out.Reset()
	if code := RunCheck(ctxT(t), &out, mod.Addr, "", "pw"); code != ExitUnfenced ||
		!strings.Contains(out.String(), "unbranded node") {
		t.Errorf("unbranded module node: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := RunInstall(ctxT(t), &out, mod.Addr, "", "pw"); code != ExitFenced ||
		!strings.Contains(out.String(), "installed: {emq}:version is now \"echomq:6.0.0\"") {
		t.Errorf("install: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := RunCheck(ctxT(t), &out, mod.Addr, "", "pw"); code != ExitFenced ||
		!strings.Contains(out.String(), "module node") || !strings.Contains(out.String(), "ENQUEUE CLAIM") {
		t.Errorf("fenced module node: exit %d\n%s", code, out.String())
	}
	t.Logf("summary of a fenced module node:\n%s", out.String())
	out.Reset()
	if code := RunInstall(ctxT(t), &out, scripts.Addr, "", ""); code != ExitUnfenced ||
		!strings.Contains(out.String(), "install refused") {
		t.Errorf("install on a scripts node: exit %d\n%s", code, out.String())
	}
}
