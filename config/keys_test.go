package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// everyEntry names an entry of each map, so that the keys of an entry are
// walked too.
const everyEntry = minimal + `
auth:
  users:
    alice: ""
`

// testKey is one key found by the test's own walk of Config (independent of
// walkKeys): its path, its type, and how to reach its field.
type testKey struct {
	path string
	typ  reflect.Type
	get  func(c *Config) reflect.Value // invalid when the entry is absent
}

// testKeys walks t: a section's fields by mapstructure tag; a map is a key
// and, for the entry of every map that base holds, its keys; anything else
// is a key.
func testKeys(t reflect.Type, path string, get func(*Config) reflect.Value, base *Config) []testKey {
	switch t.Kind() {
	case reflect.Struct:
		var out []testKey
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("mapstructure"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			p := tag
			if path != "" {
				p = path + "." + tag
			}
			out = append(out, testKeys(t.Field(i).Type, p, func(c *Config) reflect.Value {
				v := get(c)
				if !v.IsValid() {
					return v
				}
				return v.Field(i)
			}, base)...)
		}
		return out
	case reflect.Map:
		out := []testKey{{path: path, typ: t, get: get}}
		for _, k := range get(base).MapKeys() {
			out = append(out, testKeys(t.Elem(), path+"."+k.String(), func(c *Config) reflect.Value {
				return get(c).MapIndex(k)
			}, base)...)
		}
		return out
	}
	return []testKey{{path: path, typ: t, get: get}}
}

// sample returns a value of type t made from seed, and its YAML form: every
// field and entry set, so that it equals nothing a default gives.
func sample(t reflect.Type, seed string, n int) (reflect.Value, any) {
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeFor[time.Duration]():
		d := time.Duration(4000+n) * time.Millisecond
		v.SetInt(int64(d))
		return v, d.String()
	case t.Kind() == reflect.String:
		v.SetString(seed)
		return v, seed
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
		return v, true
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		v.SetInt(int64(424200 + n))
		return v, 424200 + n
	case t.Kind() == reflect.Slice:
		var items []any
		for i := range 2 {
			ev, ey := sample(t.Elem(), fmt.Sprintf("%s-%d", seed, i), n+i)
			v = reflect.Append(v, ev)
			items = append(items, ey)
		}
		return v, items
	case t.Kind() == reflect.Map:
		v = reflect.MakeMap(t)
		ev, ey := sample(t.Elem(), seed+"-entry", n)
		v.SetMapIndex(reflect.ValueOf(seed+"-name"), ev)
		return v, map[string]any{seed + "-name": ey}
	case t.Kind() == reflect.Struct:
		m := map[string]any{}
		for i := range t.NumField() {
			tag := strings.Split(t.Field(i).Tag.Get("mapstructure"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fv, fy := sample(t.Field(i).Type, seed+"-"+tag, n+i)
			v.Field(i).Set(fv)
			m[tag] = fy
		}
		return v, m
	}
	panic("sample: no value for " + t.String())
}

// sameKeys reports whether a and b hold the same value in every key: the
// fields a load fills from elsewhere (mapstructure:"-", an upstream's
// Name) are not compared.
func sameKeys(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if tag := a.Type().Field(i).Tag.Get("mapstructure"); tag != "-" && !sameKeys(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for _, k := range a.MapKeys() {
			if bv := b.MapIndex(k); !bv.IsValid() || !sameKeys(a.MapIndex(k), bv) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestEveryKeyHasItsVariable walks every key of Config and proves its
// variable is read: set to a value no default or file gives, the key's
// field holds it after a load. A map or a list of sections takes a YAML
// value; a list of strings comma-separated items.
func TestEveryKeyHasItsVariable(t *testing.T) {
	path := writeConfig(t, everyEntry)
	base, err := read(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := testKeys(reflect.TypeFor[Config](), "", func(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }, base)
	if len(keys) < 50 {
		t.Fatalf("the walk found %d keys; it is broken", len(keys))
	}
	for n, k := range keys {
		t.Run(k.path, func(t *testing.T) {
			want, y := sample(k.typ, "env-"+strings.ReplaceAll(k.path, ".", "-"), n*10)
			var value string
			switch {
			case k.typ.Kind() == reflect.Bool:
				// The opposite of what the file and the defaults give.
				want = reflect.ValueOf(!k.get(base).Bool())
				value = strconv.FormatBool(want.Bool())
			case k.typ.Kind() == reflect.Slice && k.typ.Elem().Kind() == reflect.String:
				value = strings.Join(want.Interface().([]string), " , ")
			case k.typ.Kind() == reflect.Map || k.typ.Kind() == reflect.Slice:
				b, err := yaml.Marshal(y)
				if err != nil {
					t.Fatal(err)
				}
				value = string(b)
			default:
				value = fmt.Sprint(y)
			}
			if reflect.DeepEqual(k.get(base).Interface(), want.Interface()) {
				t.Fatalf("the sample %v is what the key holds without its variable", want)
			}
			name := EnvName(k.path)
			c, err := read(path, nil, []string{name + "=" + value})
			if err != nil {
				t.Fatalf("%s=%q: %v", name, value, err)
			}
			if got := k.get(c); !got.IsValid() || !sameKeys(got, want) {
				t.Errorf("with %s=%q, %s = %#v, want %#v", name, value, k.path, got, want)
			}
		})
	}
}

// TestEnvPasswordWithTheLocalExample: the local example names no auth
// section; EMQPROXY_AUTH_PASSWORD still sets the password.
func TestEnvPasswordWithTheLocalExample(t *testing.T) {
	t.Setenv("EMQPROXY_AUTH_PASSWORD", "s3cret")
	c, err := Load("../deploy/examples/local.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth.Password != "s3cret" {
		t.Errorf("auth.password = %q, want the variable's", c.Auth.Password)
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		env      []string
		wantKey  string
		wantNear string
		source   string
	}{
		{name: "misspelt auth password", body: minimal + "auth:\n  passwrod: s3cret\n", wantKey: "auth.passwrod", wantNear: "auth.password"},
		{name: "top-level", body: minimal + "routs: []\n", wantKey: "routs", wantNear: "routes"},
		{name: "unrelated top-level", body: minimal + "verbosity: 3\n", wantKey: "verbosity"},
		{name: "in an upstream", body: strings.Replace(minimal, "role: module", "role: module\n    adress: x", 1), wantKey: "upstreams.module-a.adress", wantNear: "upstreams.module-a.address"},
		{name: "in an upstream's tls", body: strings.Replace(minimal, "role: module", "role: module\n    tls:\n      cafile: x", 1), wantKey: "upstreams.module-a.tls.cafile"},
		{name: "in a route", body: strings.Replace(minimal, "upstream: module-a", "upstream: module-a\n    upstreem: x", 1), wantKey: "routes[0].upstreem", wantNear: "routes[0].upstream"},
		{name: "in policy", body: minimal + "policy:\n  dney: [FLUSHALL]\n", wantKey: "policy.dney", wantNear: "policy.deny"},
		{name: "case differs only", body: minimal + "Limits:\n  Max_Clients: 5\n  max_clientz: 5\n", wantKey: "limits.max_clientz", wantNear: "limits.max_clients"},
		{name: "in a table variable", body: minimal, env: []string{`EMQPROXY_ROUTES=[{queues: ["*"], upstream: module-a, upsteam: x}]`}, wantKey: "routes[0].upsteam", wantNear: "routes[0].upstream", source: "EMQPROXY_ROUTES"},
		{name: "in an upstreams variable", body: minimal, env: []string{`EMQPROXY_UPSTREAMS={"module-a": {"address": "127.0.0.1:1", "rol": "module"}}`}, wantKey: "upstreams.module-a.rol", wantNear: "upstreams.module-a.role", source: "EMQPROXY_UPSTREAMS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := read(path, nil, tt.env)
			if err == nil {
				t.Fatal("an unknown key was accepted")
			}
			if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrUnknownKey and ErrInvalid", err)
			}
			source := tt.source
			if source == "" {
				source = path
			}
			want := tt.wantKey + ": unknown key in " + source
			if tt.wantNear != "" {
				want += " (did you mean " + tt.wantNear + "?)"
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows a value", err)
			}
		})
	}
	t.Run("Load and every example", func(t *testing.T) {
		if _, err := Load(writeConfig(t, minimal+"auth:\n  passwrod: s3cret\n"), nil); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("Load: %v", err)
		}
		for _, p := range []string{"../deploy/examples/local.yaml", "../deploy/examples/production.yaml"} {
			if _, err := read(p, nil, nil); err != nil {
				t.Errorf("%s: %v", p, err)
			}
		}
	})
}

func TestUnknownVariableIsAnError(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		wantNear string // "" when the variable is accepted
	}{
		{name: "misspelt", env: "EMQPROXY_AUTH_PASWORD=s3cret", wantNear: "EMQPROXY_AUTH_PASSWORD"},
		{name: "an upstream the file does not name", env: "EMQPROXY_UPSTREAMS_MODULE_B_ADDRESS=127.0.0.1:1", wantNear: "EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS"},
		{name: "a section", env: "EMQPROXY_AUTH=x"},
		{name: "nothing near", env: "EMQPROXY_VERBOSITY=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := read(writeConfig(t, minimal), nil, []string{tt.env})
			name, _, _ := strings.Cut(tt.env, "=")
			if !errors.Is(err, ErrUnknownVariable) || !strings.Contains(err.Error(), name+": names no configuration key") {
				t.Fatalf("error %v does not name %s as naming no key", err, name)
			}
			if tt.wantNear != "" && !strings.Contains(err.Error(), "did you mean "+tt.wantNear+"?") {
				t.Errorf("error %q does not suggest %s", err, tt.wantNear)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows a value", err)
			}
		})
	}
	for _, env := range []string{
		NodePasswordVariable + "=x",
		"EMQPROXY_SERVICE_HOST=10.0.0.1", "EMQPROXY_SERVICE_PORT=6380", "EMQPROXY_SERVICE_PORT_REDIS=6380",
		"EMQPROXY_PORT=tcp://10.0.0.1:6380", "EMQPROXY_PORT_6380_TCP=tcp://10.0.0.1:6380",
		"EMQPROXY_PORT_6380_TCP_PROTO=tcp", "EMQPROXY_PORT_6380_TCP_PORT=6380", "EMQPROXY_PORT_6380_TCP_ADDR=10.0.0.1",
		"OTHER_AUTH_PASWORD=x",
	} {
		if _, err := read(writeConfig(t, minimal), nil, []string{env}); err != nil {
			t.Errorf("%s: %v", env, err)
		}
	}
}

// TestOtherVariablesHideNoKey: the variables allowed without being keys
// (the node commands', Kubernetes' service links) are never a key's.
func TestOtherVariablesHideNoKey(t *testing.T) {
	c, err := read(writeConfig(t, everyEntry), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	walkKeys(configType, "", func(path string) []string {
		return slices.Sorted(func(yield func(string) bool) {
			for _, k := range reflect.ValueOf(lookupField(c, path)).MapKeys() {
				if !yield(k.String()) {
					return
				}
			}
		})
	}, func(path string, _ reflect.Type) {
		n++
		if otherVariable(EnvName(path)) {
			t.Errorf("%s's variable %s is taken for a variable that is not a key", path, EnvName(path))
		}
	})
	if n < 50 {
		t.Fatalf("walked %d keys", n)
	}
}

// lookupField returns the map at a path of c (upstreams, auth.users).
func lookupField(c *Config, path string) any {
	switch path {
	case "upstreams":
		return c.Upstreams
	case "auth.users":
		return c.Auth.Users
	}
	panic("lookupField: no map at " + path)
}

func TestVariablesOfTwoKeysCollide(t *testing.T) {
	body := strings.Replace(minimal, "routes:", "  module_a:\n    address: \"127.0.0.1:6391\"\n    role: module\nroutes:", 1)
	_, err := read(writeConfig(t, body), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "upstreams.module_a.address: its variable EMQPROXY_UPSTREAMS_MODULE_A_ADDRESS is also that of upstreams.module-a.address") {
		t.Errorf("two upstreams with one variable: %v", err)
	}
}

func TestVariableValues(t *testing.T) {
	tests := []struct {
		name    string
		env     []string
		check   func(c *Config) bool
		wantErr string
	}{
		{name: "list items trimmed, empty ones dropped", env: []string{"EMQPROXY_POLICY_DENY=FLUSHALL, CONFIG SET ,,"},
			check: func(c *Config) bool { return slices.Equal(c.Policy.Deny, []string{"FLUSHALL", "CONFIG SET"}) }},
		{name: "empty counts as unset", env: []string{"EMQPROXY_LISTEN="},
			check: func(c *Config) bool { return c.Listen == "127.0.0.1:6380" }},
		{name: "an entry's variable wins over the table variable", env: []string{
			`EMQPROXY_UPSTREAMS={module-b: {address: "127.0.0.1:1", role: module, password: table}}`,
			"EMQPROXY_UPSTREAMS_MODULE_B_PASSWORD=entry"},
			check: func(c *Config) bool {
				_, old := c.Upstreams["module-a"]
				return !old && c.Upstreams["module-b"].Password == "entry" && c.Upstreams["module-b"].Name == "module-b"
			}},
		{name: "users from a JSON table", env: []string{`EMQPROXY_AUTH_USERS={"bob": "pw"}`},
			check: func(c *Config) bool { return len(c.Auth.Users) == 1 && c.Auth.Users["bob"] == "pw" }},
		{name: "a table variable of the wrong shape", env: []string{"EMQPROXY_ROUTES={a: b}"}, wantErr: "EMQPROXY_ROUTES: routes takes a YAML sequence"},
		{name: "a table variable that is not YAML", env: []string{"EMQPROXY_AUTH_USERS={bob"}, wantErr: "EMQPROXY_AUTH_USERS: not a YAML value for auth.users"},
		{name: "a bad duration", env: []string{"EMQPROXY_TIMEOUTS_DIAL=soon"}, wantErr: "timeouts.dial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := read(writeConfig(t, minimal), nil, tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("with %v: %+v", tt.env, c)
			}
		})
	}
}

// TestDefaultsAreKeys: every default names a key of Config.
func TestDefaultsAreKeys(t *testing.T) {
	for k := range Defaults() {
		if _, ok := staticKeys[k]; !ok {
			t.Errorf("default %s names no key", k)
		}
	}
}
