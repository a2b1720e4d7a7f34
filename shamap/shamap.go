package shamap

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Tokens are the fourteen job-core verbs a module node implements, in the
// order of the job-core contract. EMQ.VERSION advertises exactly these.
var Tokens = []string{
	"ENQUEUE", "CLAIM", "EXTEND", "COMPLETE", "FAIL", "RETRY", "CANCEL",
	"PROMOTE", "REAP", "PAUSE", "RESUME", "REMOVE", "RESCHEDULE", "REQUEUE",
}

// IsToken reports whether tok is one of the fourteen job-core tokens.
func IsToken(tok string) bool { return slices.Contains(Tokens, tok) }

// ErrInvalid is wrapped by every error that rejects a map's content.
var ErrInvalid = errors.New("shamap: invalid map")

// Script is one pinned script.
type Script struct {
	Name   string `yaml:"name"`
	SHA    string `yaml:"sha"`            // 40 lower-case hex digits
	Verb   string `yaml:"verb,omitempty"` // job-core token, for a verb script
	Read   bool   `yaml:"read,omitempty"` // a declared read script
	Keys   int    `yaml:"keys"`           // pinned number of keys
	Values int    `yaml:"values"`         // pinned number of values
	// Command is "EMQ.<Verb>" for a verb script, precomputed for the data path.
	Command string `yaml:"-"`
}

// Map is a loaded, validated pinned map. It must not be modified after Load.
type Map struct {
	LegacyBrand string    `yaml:"legacy_brand"`
	Source      string    `yaml:"source"`
	Scripts     []*Script `yaml:"scripts"`

	// Path is the file the map was read from ("" when parsed from bytes).
	Path string `yaml:"-"`
	// Digest is the hex SHA-256 of the map file's bytes, shown in the startup
	// log, every audit record and the metrics.
	Digest string `yaml:"-"`

	bySHA  map[string]*Script
	byName map[string]*Script
}

// Load reads and validates the map at path.
func Load(path string) (*Map, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("shamap: %w", err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Path = path
	return m, nil
}

// Parse validates a map from its YAML bytes.
func Parse(data []byte) (*Map, error) {
	var m Map
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.index(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	m.Digest = hex.EncodeToString(sum[:])
	return &m, nil
}

func (m *Map) index() error {
	if m.LegacyBrand == "" {
		return fmt.Errorf("%w: legacy_brand is empty", ErrInvalid)
	}
	if m.LegacyBrand == "echomq:6.0.0" {
		return fmt.Errorf("%w: legacy_brand %q is the module's brand", ErrInvalid, m.LegacyBrand)
	}
	if len(m.Scripts) == 0 {
		return fmt.Errorf("%w: no scripts", ErrInvalid)
	}
	m.bySHA = make(map[string]*Script, len(m.Scripts))
	m.byName = make(map[string]*Script, len(m.Scripts))
	for i, s := range m.Scripts {
		if s == nil {
			return fmt.Errorf("%w: scripts[%d] is empty", ErrInvalid, i)
		}
		where := fmt.Sprintf("scripts[%d] (%s)", i, s.Name)
		switch {
		case s.Name == "":
			return fmt.Errorf("%w: %s: name is empty", ErrInvalid, where)
		case !IsSHA(s.SHA):
			return fmt.Errorf("%w: %s: sha %q is not 40 lower-case hex digits", ErrInvalid, where, s.SHA)
		case s.Read && s.Verb != "":
			return fmt.Errorf("%w: %s: both verb and read are set", ErrInvalid, where)
		case !s.Read && s.Verb == "":
			return fmt.Errorf("%w: %s: neither verb nor read is set", ErrInvalid, where)
		case s.Verb != "" && !IsToken(s.Verb):
			return fmt.Errorf("%w: %s: verb %q is not a job-core token", ErrInvalid, where, s.Verb)
		case s.Keys < 0 || s.Values < 0:
			return fmt.Errorf("%w: %s: keys and values must not be negative", ErrInvalid, where)
		}
		if _, dup := m.bySHA[s.SHA]; dup {
			return fmt.Errorf("%w: %s: sha %s is pinned twice", ErrInvalid, where, s.SHA)
		}
		if _, dup := m.byName[s.Name]; dup {
			return fmt.Errorf("%w: %s: name is pinned twice", ErrInvalid, where)
		}
		if s.Verb != "" {
			s.Command = "EMQ." + s.Verb
		}
		m.bySHA[s.SHA] = s
		m.byName[s.Name] = s
	}
	return nil
}

// IsSHA reports whether s is 40 lower-case hex digits.
func IsSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SHA returns the hex SHA-1 of a script body, as the server computes it.
func SHA(body []byte) string {
	sum := sha1.Sum(body)
	return hex.EncodeToString(sum[:])
}

// Lookup finds a script by its sha. Like the server, it accepts the sha in
// either case; it does not allocate for a lower-case sha.
func (m *Map) Lookup(sha []byte) (*Script, bool) {
	if len(sha) != 40 {
		return nil, false
	}
	s, ok := m.bySHA[string(sha)]
	if !ok {
		s, ok = m.bySHA[strings.ToLower(string(sha))]
	}
	return s, ok
}

// LookupBody finds a script by its body (EVAL, SCRIPT LOAD).
func (m *Map) LookupBody(body []byte) (*Script, bool) {
	s, ok := m.bySHA[SHA(body)]
	return s, ok
}

// ByName finds a script by its name.
func (m *Map) ByName(name string) (*Script, bool) {
	s, ok := m.byName[name]
	return s, ok
}

// UsedTokens returns the tokens the map's verb scripts use, sorted.
func (m *Map) UsedTokens() []string {
	var out []string
	for _, s := range m.Scripts {
		if s.Verb != "" && !slices.Contains(out, s.Verb) {
			out = append(out, s.Verb)
		}
	}
	slices.Sort(out)
	return out
}

// Mismatch is one script whose body does not hash to its pin.
type Mismatch struct {
	Name   string
	Pinned string
	Actual string // "" when the body file is missing
	Err    error
}

// VerifyBodies checks every pin against the body <dir>/<name>.lua and
// returns the mismatches (empty when all match).
func (m *Map) VerifyBodies(dir string) []Mismatch {
	var out []Mismatch
	for _, s := range m.Scripts {
		body, err := os.ReadFile(filepath.Join(dir, s.Name+".lua"))
		if err != nil {
			out = append(out, Mismatch{Name: s.Name, Pinned: s.SHA, Err: err})
			continue
		}
		if got := SHA(body); got != s.SHA {
			out = append(out, Mismatch{Name: s.Name, Pinned: s.SHA, Actual: got})
		}
	}
	return out
}

// Payload lists the positions of a script's calls and replies that carry
// job data rather than structure: what a capture must not keep in clear
// (capture's redaction). Values are 1-based positions among the call's
// values (after the keys); Reply are 1-based elements of its array reply.
type Payload struct {
	Values []int
	Reply  []int
}

// Payload returns the payload positions of the script's shape. They follow
// from the job-core contract, by token: ENQUEUE's payload (value 2), FAIL's
// error text (value 2) and CLAIM's payload (reply element 2); of the
// declared reads, the row read "peek" replies the payload as element 3.
// Every other position is structure (keys, ids, integers, counts).
func (s *Script) Payload() Payload {
	switch {
	case s.Verb == "ENQUEUE", s.Verb == "FAIL":
		return Payload{Values: []int{2}}
	case s.Verb == "CLAIM":
		return Payload{Reply: []int{2}}
	case s.Read && s.Name == "peek":
		return Payload{Reply: []int{3}}
	}
	return Payload{}
}
