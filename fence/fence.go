package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/emqproxy/emqproxy/shamap"
)

// The names of the fence (job-core.md, "Brands and the version key").
const (
	// VersionKey holds a node's brand.
	VersionKey = "{emq}:version"
	// ModuleBrand is the module node's brand and the wire EMQ.VERSION reports.
	ModuleBrand = "echomq:6.0.0"
	// ModuleMajor is the module major version the proxy accepts.
	ModuleMajor = "0"
)

// Kind is what a node turned out to be.
type Kind int

// The kinds of node.
const (
	// NotModule: EMQ.VERSION is unknown or fails the wire-6 check (wire,
	// module major, tokens); CheckModule stops there.
	NotModule Kind = iota
	// ModuleNode: a valid EMQ.VERSION and the brand echomq:6.0.0.
	ModuleNode
	// ScriptsNode: no module, and a legacy brand (for CheckScripts: the
	// expected one; for Inspect: any "echomq:" brand but echomq:6.0.0).
	ScriptsNode
	// Unbranded: {emq}:version is absent.
	Unbranded
	// Foreign: any other combination, e.g. a module node with a legacy
	// brand, a scripts node with the module's brand, another value, or a
	// key that is not a string.
	Foreign
)

// String names the kind as the fence check prints it.
func (k Kind) String() string {
	switch k {
	case NotModule:
		return "not a module node"
	case ModuleNode:
		return "module node"
	case ScriptsNode:
		return "scripts node"
	case Unbranded:
		return "unbranded node"
	case Foreign:
		return "foreign node"
	}
	return "unknown"
}

// Result is what a check found.
type Result struct {
	Kind          Kind
	Brand         string   // the value of {emq}:version (when it is a string)
	BrandAbsent   bool     // {emq}:version is absent
	Wire          string   // EMQ.VERSION's wire ("" without the module)
	ModuleVersion string   // EMQ.VERSION's module version ("" without the module)
	Tokens        []string // EMQ.VERSION's verbs
	Installed     bool     // the check branded the key itself
}

// Module reports whether EMQ.VERSION answered.
func (r Result) Module() bool { return r.Wire != "" || r.ModuleVersion != "" || r.Tokens != nil }

// CheckModule runs the wire-6 fence against a module node: EMQ.VERSION
// must report wire echomq:6.0.0, module major 0 and exactly the fourteen
// job-core tokens (and every token m uses; m may be nil); then
// {emq}:version must be echomq:6.0.0. When it is absent and install is
// true, CheckModule sends EMQ.INSTALL 1 {emq}:version and checks again;
// otherwise it writes nothing.
func CheckModule(ctx context.Context, c Conn, m *shamap.Map, install bool) (Result, error) {
	var res Result
	if err := readVersion(ctx, c, &res); err != nil {
		res.Kind = NotModule
		return res, err
	}
	if err := checkVersion(res, m); err != nil {
		res.Kind = NotModule
		return res, err
	}
	err := checkBrand(ctx, c, &res, ModuleBrand, install, ModuleNode, func() (bool, error) {
		_, err := Install(ctx, c)
		return err == nil, err
	})
	return res, err
}

// CheckScripts runs the wire-4 connector's fence against a scripts node:
// {emq}:version must be brand. When it is absent and install is true,
// CheckScripts sends SET {emq}:version <brand> NX and reads it back, as
// the wire-4 connector does; otherwise it writes nothing.
func CheckScripts(ctx context.Context, c Conn, brand string, install bool) (Result, error) {
	var res Result
	err := checkBrand(ctx, c, &res, brand, install, ScriptsNode, func() (bool, error) {
		r, err := c.Do(ctx, "SET", VersionKey, brand, "NX")
		if err != nil {
			return false, fmt.Errorf("fence: SET %s NX: %w", VersionKey, err)
		}
		if r.IsError() {
			return false, fmt.Errorf("%w: SET %s NX: %s", ErrInstall, VersionKey, r.Str)
		}
		return !r.Null, nil
	})
	return res, err
}

// checkBrand reads {emq}:version into res and requires want. An absent key
// is claimed with claim (which reports whether it wrote) when install is
// set, then read again. On success res.Kind is ok.
func checkBrand(ctx context.Context, c Conn, res *Result, want string, install bool, ok Kind, claim func() (bool, error)) error {
	if err := readBrand(ctx, c, res); err != nil {
		res.Kind = Foreign
		return err
	}
	if res.BrandAbsent && install {
		wrote, err := claim()
		if err != nil {
			res.Kind = Unbranded
			return err
		}
		res.Installed = wrote
		if err := readBrand(ctx, c, res); err != nil {
			res.Kind = Foreign
			return err
		}
	}
	switch {
	case res.BrandAbsent:
		res.Kind = Unbranded
		return fmt.Errorf("%w: %s is absent and install is off", ErrBrandAbsent, VersionKey)
	case res.Brand != want:
		res.Kind = Foreign
		return fmt.Errorf("%w: %s is %q, want %q", ErrForeignBrand, VersionKey, res.Brand, want)
	}
	res.Kind = ok
	return nil
}

// Inspect says what a node is, writing nothing: whether EMQ.VERSION
// answers (and what), and the brand. The error is for transport failures
// only.
func Inspect(ctx context.Context, c Conn) (Result, error) {
	var res Result
	err := readVersion(ctx, c, &res)
	if err != nil && !isFenceErr(err) {
		return res, err
	}
	module := err == nil && checkVersion(res, nil) == nil
	if err := readBrand(ctx, c, &res); err != nil {
		if !isFenceErr(err) {
			return res, err
		}
		res.Kind = Foreign
		return res, nil
	}
	switch {
	case res.BrandAbsent:
		res.Kind = Unbranded
	case module && res.Brand == ModuleBrand:
		res.Kind = ModuleNode
	case !res.Module() && res.Brand != ModuleBrand && strings.HasPrefix(res.Brand, "echomq:"):
		res.Kind = ScriptsNode
	default:
		res.Kind = Foreign
	}
	return res, nil
}

// Install sends EMQ.INSTALL 1 {emq}:version and returns its reply: 1 when
// it wrote echomq:6.0.0, 0 when the key already held it. Any other value
// of the key, or a node without the module, is an ErrInstall with the
// node's text.
func Install(ctx context.Context, c Conn) (int64, error) {
	r, err := c.Do(ctx, "EMQ.INSTALL", "1", VersionKey)
	if err != nil {
		return 0, fmt.Errorf("fence: EMQ.INSTALL: %w", err)
	}
	if r.IsError() {
		return 0, fmt.Errorf("%w: EMQ.INSTALL 1 %s: %s", ErrInstall, VersionKey, r.Str)
	}
	if r.Type != ':' {
		return 0, fmt.Errorf("%w: EMQ.INSTALL replied %s, want an integer", ErrInstall, describe(r))
	}
	return r.Int, nil
}

// readVersion calls EMQ.VERSION and fills res from its flat array reply
// ["wire", w, "module", v, "verbs", [tokens]].
func readVersion(ctx context.Context, c Conn, res *Result) error {
	r, err := c.Do(ctx, "EMQ.VERSION")
	if err != nil {
		return fmt.Errorf("fence: EMQ.VERSION: %w", err)
	}
	if r.IsError() {
		return fmt.Errorf("%w: EMQ.VERSION: %s", ErrNotModule, r.Str)
	}
	if r.Type != '*' || len(r.Elems)%2 != 0 {
		return fmt.Errorf("%w: EMQ.VERSION replied %s, want a flat array of fields", ErrNotModule, describe(r))
	}
	for i := 0; i < len(r.Elems); i += 2 {
		k, v := r.Elems[i], r.Elems[i+1]
		switch k.Str {
		case "wire":
			res.Wire = v.Str
		case "module":
			res.ModuleVersion = v.Str
		case "verbs":
			res.Tokens = []string{}
			for _, e := range v.Elems {
				res.Tokens = append(res.Tokens, e.Str)
			}
		}
	}
	if res.Wire == "" || res.ModuleVersion == "" || res.Tokens == nil {
		return fmt.Errorf("%w: EMQ.VERSION replied %s, want wire, module and verbs", ErrNotModule, describe(r))
	}
	return nil
}

// checkVersion applies the wire-6 rules to what EMQ.VERSION reported.
func checkVersion(res Result, m *shamap.Map) error {
	if res.Wire != ModuleBrand {
		return fmt.Errorf("%w: EMQ.VERSION wire is %q, want %q", ErrWire, res.Wire, ModuleBrand)
	}
	if major, _, _ := strings.Cut(res.ModuleVersion, "."); major != ModuleMajor {
		return fmt.Errorf("%w: module version is %q, want major %s", ErrModuleMajor, res.ModuleVersion, ModuleMajor)
	}
	var missing, extra []string
	for _, tok := range shamap.Tokens {
		if !slices.Contains(res.Tokens, tok) {
			missing = append(missing, tok)
		}
	}
	seen := map[string]bool{}
	for _, tok := range res.Tokens {
		if !shamap.IsToken(tok) || seen[tok] {
			extra = append(extra, tok)
		}
		seen[tok] = true
	}
	if len(missing) > 0 || len(extra) > 0 {
		return fmt.Errorf("%w: EMQ.VERSION verbs %v are not exactly the fourteen job-core tokens (missing %v, unexpected or repeated %v)",
			ErrTokens, res.Tokens, missing, extra)
	}
	if m != nil {
		for _, tok := range m.UsedTokens() {
			if !slices.Contains(res.Tokens, tok) {
				return fmt.Errorf("%w: the map uses %s, which EMQ.VERSION does not advertise", ErrTokens, tok)
			}
		}
	}
	return nil
}

// readBrand reads {emq}:version into res.
func readBrand(ctx context.Context, c Conn, res *Result) error {
	r, err := c.Do(ctx, "GET", VersionKey)
	if err != nil {
		return fmt.Errorf("fence: GET %s: %w", VersionKey, err)
	}
	res.Brand, res.BrandAbsent = "", false
	switch {
	case r.IsError():
		return fmt.Errorf("%w: GET %s: %s", ErrBrandType, VersionKey, r.Str)
	case r.Null:
		res.BrandAbsent = true
	case r.Type == '$' || r.Type == '+':
		res.Brand = r.Str
	default:
		return fmt.Errorf("%w: GET %s replied %s", ErrBrandType, VersionKey, describe(r))
	}
	return nil
}

// isFenceErr reports whether err is one of the package's check failures
// (as opposed to a transport error).
func isFenceErr(err error) bool {
	for _, s := range []error{ErrNotModule, ErrWire, ErrModuleMajor, ErrTokens, ErrBrandAbsent,
		ErrForeignBrand, ErrBrandType, ErrInstall} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// describe is a short text for an unexpected reply.
func describe(r Reply) string {
	switch r.Type {
	case '-':
		return "error " + strconv.Quote(r.Str)
	case ':':
		return fmt.Sprintf("integer %d", r.Int)
	case '*':
		return fmt.Sprintf("an array of %d", len(r.Elems))
	case '_':
		return "nil"
	}
	return strconv.Quote(r.Str)
}
