package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/emqproxy/emqproxy/config"
)

// repoRoot is the repository root seen from this package's directory, where
// go test runs.
const repoRoot = ".."

// testDir holds files shared by the package's tests (the built binary).
var testDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// productionExample is the commented example of every key.
const productionExample = "examples/production.yaml"

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// decodeAll decodes every document of a multi-document YAML stream.
func decodeAll(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// loadConfigBytes loads a configuration held in memory (a ConfigMap entry)
// with config.Load, through a file as the proxy reads it.
func loadConfigBytes(t *testing.T, data []byte) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "emqproxy.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return c
}

// configKeys lists every key of config.Config as a dotted path of its
// mapstructure names. A map of structs contributes its element's keys under
// "<key>.*", a slice of structs under "<key>[]".
func configKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft.String() != "time.Duration":
			keys = append(keys, configKeys(ft, key+".")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, configKeys(ft.Elem(), key+".*.")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, configKeys(ft.Elem(), key+"[].")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// missingIn returns the places where key (as configKeys writes it) is
// missing from the decoded document.
func missingIn(doc any, key string) []string {
	var walk func(v any, parts []string, at string) []string
	walk = func(v any, parts []string, at string) []string {
		if len(parts) == 0 {
			return nil
		}
		part := parts[0]
		if name, ok := strings.CutSuffix(part, "[]"); ok {
			m, _ := v.(map[string]any)
			list, _ := m[name].([]any)
			if len(list) == 0 {
				return []string{at + name}
			}
			var out []string
			for i, el := range list {
				out = append(out, walk(el, parts[1:], fmt.Sprintf("%s%s[%d].", at, name, i))...)
			}
			return out
		}
		m, ok := v.(map[string]any)
		if !ok {
			return []string{strings.TrimSuffix(at, ".")}
		}
		if part == "*" {
			if len(m) == 0 {
				return []string{at + "*"}
			}
			var out []string
			for name, el := range m {
				out = append(out, walk(el, parts[1:], at+name+".")...)
			}
			return out
		}
		el, ok := m[part]
		if !ok {
			return []string{at + part}
		}
		return walk(el, parts[1:], at+part+".")
	}
	return walk(doc, strings.Split(key, "."), "")
}

func TestProductionExampleLoads(t *testing.T) {
	if _, err := config.Load(productionExample, nil); err != nil {
		t.Fatalf("config.Load(%s): %v", productionExample, err)
	}
}

func TestProductionExampleHasEveryKey(t *testing.T) {
	var doc map[string]any
	if err := yaml.Unmarshal(readFile(t, productionExample), &doc); err != nil {
		t.Fatal(err)
	}
	keys := configKeys(reflect.TypeFor[config.Config](), "")
	if len(keys) < 40 {
		t.Fatalf("found only %d keys in config.Config; the walk is broken: %v", len(keys), keys)
	}
	for _, key := range keys {
		for _, miss := range missingIn(doc, key) {
			t.Errorf("%s does not show key %s (missing at %s)", productionExample, key, miss)
		}
	}
}

// yamlNode finds the key and value nodes of a dotted path in a document.
func yamlNode(root *yaml.Node, path string) (key, val *yaml.Node) {
	n := root
	if n.Kind == yaml.DocumentNode {
		n = n.Content[0]
	}
	for _, part := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil, nil
		}
		var found bool
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part {
				key, n, found = n.Content[i], n.Content[i+1], true
				break
			}
		}
		if !found {
			return nil, nil
		}
	}
	return key, n
}

// TestProductionExampleDefaults checks that each key with a built-in default
// either shows that default or says what the default is.
func TestProductionExampleDefaults(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal(readFile(t, productionExample), &root); err != nil {
		t.Fatal(err)
	}
	defaults := config.Defaults()
	names := make([]string, 0, len(defaults))
	for k := range defaults {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		def := fmt.Sprint(defaults[k])
		key, val := yamlNode(&root, k)
		if key == nil {
			t.Errorf("%s: key %s is missing", productionExample, k)
			continue
		}
		if val.Value == def {
			continue
		}
		comment := key.HeadComment + " " + key.LineComment + " " + val.LineComment
		if !strings.Contains(strings.ToLower(comment), "default") || !strings.Contains(comment, def) {
			t.Errorf("%s: %s is %q, not its default %q, and its comment does not say `Default: %s`", productionExample, k, val.Value, def, def)
		}
	}
}

// envOverrideLine matches the table of environment names in the example's
// header: "#   EMQPROXY_LISTEN    listen".
var envOverrideLine = regexp.MustCompile(`(?m)^#\s+(EMQPROXY_[A-Z0-9_]+)\s+([a-z0-9_.-]+)\s*$`)

// TestProductionExampleEnvOverrides sets each environment variable the
// example documents and checks that it overrides the key it names.
func TestProductionExampleEnvOverrides(t *testing.T) {
	type override struct {
		value string
		got   func(*config.Config) string
	}
	overrides := map[string]override{
		"listen":                      {"127.0.0.1:16380", func(c *config.Config) string { return c.Listen }},
		"admin.listen":                {"127.0.0.1:19121", func(c *config.Config) string { return c.Admin.Listen }},
		"admin.token":                 {"an-admin-token-0123456789", func(c *config.Config) string { return c.Admin.Token }},
		"log.level":                   {"debug", func(c *config.Config) string { return c.Log.Level }},
		"auth.password":               {"client-secret", func(c *config.Config) string { return c.Auth.Password }},
		"upstreams.module-a.password": {"upstream-secret", func(c *config.Config) string { return c.Upstreams["module-a"].Password }},
		"runtime.gomaxprocs":          {"3", func(c *config.Config) string { return fmt.Sprint(c.Runtime.GOMAXPROCS) }},
	}
	documented := envOverrideLine.FindAllStringSubmatch(string(readFile(t, productionExample)), -1)
	if len(documented) == 0 {
		t.Fatalf("%s documents no EMQPROXY_ variable", productionExample)
	}
	for _, m := range documented {
		env, key := m[1], m[2]
		want := config.EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
		if env != want {
			t.Errorf("%s documents %s for %s; the name is %s", productionExample, env, key, want)
		}
		o, ok := overrides[key]
		if !ok {
			t.Errorf("%s documents %s for %s, which this test does not exercise", productionExample, env, key)
			continue
		}
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, o.value)
			c, err := config.Load(productionExample, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := o.got(c); got != o.value {
				t.Errorf("with %s=%s, %s = %q", env, o.value, key, got)
			}
		})
	}
}
