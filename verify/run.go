package verify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/emqproxy/emqproxy/netaddr"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Run measures the scratch server of cfg: it refuses unless every body
// hashes to its pin and the server is an empty module node branded
// echomq:6.0.0, then runs every case and the AOF and restart checks.
// Differences are in the Report; an error means nothing was measured (or
// the run was cut short by the server).
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	bodies, err := loadBodies(cfg)
	if err != nil {
		return rep, err
	}
	c, err := dial(cfg)
	if err != nil {
		return rep, err
	}
	h := &harness{ex: &executor{c: c, bodies: bodies}}
	defer func() { h.ex.c.Close() }()
	baseline, err := h.preflight(ctx, cfg)
	if err != nil {
		return rep, err
	}
	rep.Server, rep.RunID, rep.CachedClock = h.version, h.runID, h.cachedClock

	for _, tc := range allCases(cfg.Map.LegacyBrand) {
		res, blame, err := h.runCase(ctx, tc)
		if err != nil {
			return rep, err
		}
		if blame != nil {
			rep.Cases = append(rep.Cases, *blame)
		}
		stray, err := h.outside(ctx, baseline)
		if err != nil {
			return rep, err
		}
		if len(stray) > 0 {
			res.Status = Differing
			res.Diffs = append(res.Diffs, stray...)
		}
		rep.Cases = append(rep.Cases, res)
	}
	rep.AOF = h.checkAOF(ctx)
	rep.Restart, err = h.checkRestart(ctx, cfg)
	if cfg.Out != nil {
		fmt.Fprint(cfg.Out, rep.String())
	}
	return rep, err
}

// dial opens the harness's client.
func dial(cfg Config) (valkey.Client, error) {
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{cfg.Addr},
		DialCtxFn:         netaddr.DialValkey, // host:port or unix:/path
		Username:          cfg.Username,
		Password:          cfg.Password,
		AlwaysRESP2:       true, // the reply types the scripts' clients see
		DisableCache:      true,
		DisableRetry:      true, // a retried write would run twice
		ForceSingleClient: true,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: connect %s: %v", ErrServer, cfg.Addr, err)
	}
	return c, nil
}

// loadBodies verifies every pin against its body and reads the bodies the
// cases need, by token and read name.
func loadBodies(cfg Config) (map[string]string, error) {
	switch {
	case cfg.Addr == "":
		return nil, fmt.Errorf("%w: no server address", ErrConfig)
	case cfg.Map == nil:
		return nil, fmt.Errorf("%w: no pinned map", ErrConfig)
	case cfg.BodiesDir == "":
		return nil, fmt.Errorf("%w: no bodies folder", ErrConfig)
	}
	if bad := cfg.Map.VerifyBodies(cfg.BodiesDir); len(bad) > 0 {
		var parts []string
		for _, m := range bad {
			switch {
			case m.Err != nil:
				parts = append(parts, fmt.Sprintf("%s: %v", m.Name, m.Err))
			default:
				parts = append(parts, fmt.Sprintf("%s: body hashes to %s, pinned %s", m.Name, m.Actual, m.Pinned))
			}
		}
		return nil, fmt.Errorf("%w: refusing to measure: %s", ErrPin, strings.Join(parts, "; "))
	}
	bodies := map[string]string{}
	for _, s := range cfg.Map.Scripts {
		key := s.Verb
		if s.Read {
			key = s.Name
		}
		spec, known := scriptShape(key)
		if !known {
			continue // a script the harness has no cases for
		}
		if s.Keys != spec[0] || s.Values != spec[1] {
			return nil, fmt.Errorf("%w: %s is pinned with %d keys and %d values, the contract says %d and %d", ErrConfig, s.Name, s.Keys, s.Values, spec[0], spec[1])
		}
		body, err := os.ReadFile(filepath.Join(cfg.BodiesDir, s.Name+".lua"))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		bodies[key] = string(body)
	}
	for _, v := range verbs {
		if _, ok := bodies[v.Token]; !ok && !nativeOnly[v.Token] {
			return nil, fmt.Errorf("%w: the map pins no script for %s", ErrConfig, v.Token)
		}
	}
	for _, r := range readNames {
		if _, ok := bodies[r]; !ok {
			return nil, fmt.Errorf("%w: the map pins no read script %q", ErrConfig, r)
		}
	}
	return bodies, nil
}

// scriptShape is the contract's key and value count of a scripted verb or
// read.
func scriptShape(key string) ([2]int, bool) {
	for _, v := range verbs {
		if v.Token == key && !nativeOnly[key] {
			return [2]int{len(v.Keys), len(v.Vals)}, true
		}
	}
	if roles, ok := readRoles[key]; ok {
		return [2]int{len(roles), 0}, true
	}
	return [2]int{}, false
}

// preflight checks the server is a module node branded echomq:6.0.0 with an
// empty keyspace (or Force), reads its capabilities, and returns the keys
// present before the run.
func (h *harness) preflight(ctx context.Context, cfg Config) (map[string]bool, error) {
	if err := h.ex.c.Do(ctx, h.ex.c.B().Ping().Build()).Error(); err != nil {
		return nil, fmt.Errorf("%w: PING %s: %v", ErrServer, cfg.Addr, err)
	}
	info, err := readServerInfo(ctx, h.ex.c)
	if err != nil {
		return nil, err
	}
	h.runID, h.version, h.cachedClock = info.RunID, info.Version, info.CachedClock
	b, err := h.brand(ctx)
	if err != nil {
		return nil, err
	}
	if b != Brand {
		return nil, fmt.Errorf("%w: %s holds %s, want %s", ErrNotScratch, versionKey, brandText(b), Brand)
	}
	if err := h.checkVersion(ctx); err != nil {
		return nil, err
	}
	keys, err := scanKeys(ctx, h.ex.c, "")
	if err != nil {
		return nil, err
	}
	baseline := map[string]bool{}
	for _, k := range keys {
		baseline[k] = true
	}
	if len(keys) > 1 {
		if !cfg.Force {
			return nil, fmt.Errorf("%w: %d keys besides %s (first %q); use a scratch node or force", ErrNotEmpty, len(keys)-1, versionKey, firstOther(keys))
		}
		tag := make([]byte, 3)
		_, _ = rand.Read(tag)
		h.tag = hex.EncodeToString(tag)
	}
	return baseline, nil
}

func firstOther(keys []string) string {
	for _, k := range keys {
		if k != versionKey {
			return k
		}
	}
	return ""
}

// outside checks the brand and that no key was written outside the
// queues of the run: DBSIZE must be the baseline plus the run's queue keys.
func (h *harness) outside(ctx context.Context, baseline map[string]bool) ([]Diff, error) {
	var diffs []Diff
	b, err := h.brand(ctx)
	if err != nil {
		return nil, err
	}
	if b != Brand {
		diffs = append(diffs, Diff{Where: "key " + versionKey, Want: Brand, Got: brandText(b)})
		if err := h.setBrand(ctx, Brand); err != nil {
			return nil, err
		}
	}
	size, err := h.ex.c.Do(ctx, h.ex.c.B().Dbsize().Build()).AsInt64()
	if err != nil {
		return nil, fmt.Errorf("%w: DBSIZE: %v", ErrServer, err)
	}
	if size == int64(len(baseline))+int64(h.queueKeys) {
		return diffs, nil
	}
	keys, err := scanKeys(ctx, h.ex.c, "")
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if !baseline[k] && !h.ownsKey(k) {
			diffs = append(diffs, Diff{Where: "key " + k + " outside the queues' hashtags", Want: "(absent)", Got: "written"})
		}
	}
	return diffs, nil
}

// ownsKey reports whether k lies under one of the run's queues.
func (h *harness) ownsKey(k string) bool {
	for _, q := range h.queues {
		if strings.HasPrefix(k, queueKey(q)) {
			return true
		}
	}
	return false
}

// checkRestart restarts the server through cfg.Restart and compares the
// whole keyspace before and after.
func (h *harness) checkRestart(ctx context.Context, cfg Config) (Check, error) {
	chk := Check{Name: "same state after a restart that loads the AOF"}
	if cfg.Restart == nil {
		return chk.notRun("the harness cannot restart a remote node (restart it with its AOF and compare by hand)"), nil
	}
	if on, err := h.configGet(ctx, "appendonly"); err != nil || on != "yes" {
		return chk.notRun("appendonly is off on the server"), nil
	}
	before, err := h.wholeKeyspace(ctx)
	if err != nil {
		return chk, err
	}
	if err := cfg.Restart(ctx); err != nil {
		return chk, fmt.Errorf("%w: restart: %v", ErrServer, err)
	}
	if err := h.reconnect(ctx, cfg); err != nil {
		return chk, err
	}
	after, err := h.wholeKeyspace(ctx)
	if err != nil {
		return chk, err
	}
	diffs := compareExact(before, after)
	if len(diffs) == 0 {
		chk.Status, chk.Detail = Equal, fmt.Sprintf("%d keys equal", len(before))
		return chk, nil
	}
	chk.Status = Differing
	var parts []string
	for i, d := range diffs {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("... %d more", len(diffs)-5))
			break
		}
		parts = append(parts, d.String())
	}
	chk.Detail = strings.Join(parts, "; ")
	return chk, nil
}

func (h *harness) wholeKeyspace(ctx context.Context) (Snapshot, error) {
	keys, err := scanKeys(ctx, h.ex.c, "")
	if err != nil {
		return nil, err
	}
	return readKeys(ctx, h.ex.c, keys, "")
}

// reconnect replaces the client (a restart breaks its connections) once
// the server answers PING, within a deadline.
func (h *harness) reconnect(ctx context.Context, cfg Config) error {
	h.ex.c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := dial(cfg)
		if err == nil {
			if err = c.Do(ctx, c.B().Ping().Build()).Error(); err == nil {
				h.ex.c = c
				return nil
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: server did not answer after the restart: %v", ErrServer, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
