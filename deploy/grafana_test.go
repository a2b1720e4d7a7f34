package deploy_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const dashboardFile = "grafana/emqproxy.json"

// metricPackages are where the proxy's metrics are registered: these
// packages and every package below them (proxy's own packages, whatever
// they are called).
var metricPackages = []string{"proxy", "admin", "fence", "cmd/emqproxy"}

// packagesUnder returns pkg and every directory below it.
func packagesUnder(t *testing.T, pkg string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(filepath.Join(repoRoot, pkg), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel(repoRoot, path)
			dirs = append(dirs, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// metricKind is how a metric is exposed: a histogram adds _bucket, _sum and
// _count series.
type metricKind int

const (
	plainMetric metricKind = iota
	histogramMetric
)

// registeredMetrics reads the metric names the proxy's packages declare in
// prometheus.{Counter,Gauge,Histogram,Summary}Opts literals (Namespace,
// Subsystem and Name joined as client_golang does). Only string literals
// and package constants are resolved.
func registeredMetrics(t *testing.T) map[string]metricKind {
	t.Helper()
	out := map[string]metricKind{}
	var pkgs []string
	for _, p := range metricPackages {
		pkgs = append(pkgs, packagesUnder(t, p)...)
	}
	for _, pkg := range pkgs {
		fset := token.NewFileSet()
		files, _ := filepath.Glob(filepath.Join(repoRoot, pkg, "*.go"))
		var parsed []*ast.File
		consts := map[string]string{}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Logf("skipping %s: %v", f, err)
				continue
			}
			parsed = append(parsed, af)
			for _, d := range af.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, s := range gd.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[n.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
		str := func(e ast.Expr) string {
			switch v := e.(type) {
			case *ast.BasicLit:
				s, _ := strconv.Unquote(v.Value)
				return s
			case *ast.Ident:
				return consts[v.Name]
			}
			return ""
		}
		for _, af := range parsed {
			ast.Inspect(af, func(n ast.Node) bool {
				cl, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				sel, ok := cl.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				parts := map[string]string{}
				for _, el := range cl.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok {
							parts[k.Name] = str(kv.Value)
						}
					}
				}
				if parts["Name"] == "" {
					return true
				}
				var name []string
				for _, p := range []string{parts["Namespace"], parts["Subsystem"], parts["Name"]} {
					if p != "" {
						name = append(name, p)
					}
				}
				kind := plainMetric
				if sel.Sel.Name == "HistogramOpts" {
					kind = histogramMetric
				}
				out[strings.Join(name, "_")] = kind
				return true
			})
		}
	}
	return out
}

var metricRef = regexp.MustCompile(`\bemqproxy_[a-zA-Z0-9_]+`)

// runtimeMetricRef matches the Go runtime and process metrics the serve
// command registers (client_golang's collectors); TestServeKubernetesConfig
// checks the ones the dashboard queries are exposed.
var runtimeMetricRef = regexp.MustCompile(`\b(?:process|go)_[a-z0-9_]+`)

// queriedMetrics returns every emqproxy_ series name the dashboard queries,
// with the panels that use it, and the queries that read none.
func queriedMetrics(d dashboard) (map[string][]string, []string) {
	used := map[string][]string{}
	var foreign []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				names := metricRef.FindAllString(tg.Expr, -1)
				if len(names) == 0 && !runtimeMetricRef.MatchString(tg.Expr) {
					foreign = append(foreign, p.Title+": "+tg.Expr)
				}
				for _, n := range names {
					used[n] = append(used[n], p.Title)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return used, foreign
}

func TestGrafanaDashboardParses(t *testing.T) {
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Error("dashboard has no title or uid")
	}
	ids := map[int]bool{}
	var queries int
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d is used twice", p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q is outside the 24-column grid: %+v", p.Title, p.GridPos)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			queries += len(p.Targets)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("the dashboard queries nothing")
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, want := range []string{"datasource", "instance"} {
		if !slices.Contains(vars, want) {
			t.Errorf("dashboard lacks the $%s variable", want)
		}
	}
	_, foreign := queriedMetrics(d)
	for _, q := range foreign {
		t.Errorf("query reads no emqproxy_ metric: %s", q)
	}
}

// TestGrafanaDashboardQueriesRegisteredMetrics: every series the dashboard
// queries is one the proxy registers, and the topics the operators watch
// each have a panel.
func TestGrafanaDashboardQueriesRegisteredMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	if len(registered) == 0 {
		t.Skipf("no emqproxy metric is declared in %v yet; the dashboard's queries cannot be checked", metricPackages)
	}
	used, _ := queriedMetrics(loadDashboard(t))
	for name, panels := range used {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok {
				if kind, known := registered[b]; known && kind == histogramMetric {
					base = b
				}
			}
		}
		if _, ok := registered[base]; !ok {
			t.Errorf("panels %q query %s, which the proxy does not register", panels, name)
		}
	}
	// Every registered metric has a panel, so a new metric is a
	// deliberate choice to chart or not.
	var unused []string
	for name, kind := range registered {
		n := name
		if kind == histogramMetric {
			n += "_bucket"
		}
		if _, ok := used[n]; !ok {
			if _, ok := used[name]; !ok {
				unused = append(unused, name)
			}
		}
	}
	slices.Sort(unused)
	if len(unused) > 0 {
		t.Errorf("registered metrics without a panel: %v", unused)
	}
	t.Logf("%d registered metrics, %d queried series", len(registered), len(used))
}

// runtimeMetricsQueried returns the process_ and go_ metrics the dashboard
// queries.
func runtimeMetricsQueried(t *testing.T) []string {
	t.Helper()
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				for _, n := range runtimeMetricRef.FindAllString(tg.Expr, -1) {
					if !slices.Contains(out, n) {
						out = append(out, n)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(loadDashboard(t).Panels)
	return out
}
