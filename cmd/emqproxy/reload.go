package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/proxy"
	"github.com/emqproxy/emqproxy/shamap"
)

// reloadMetrics count the reloads (SIGHUP, POST /reload) by outcome.
type reloadMetrics struct {
	total *prometheus.CounterVec // result: applied | refused
	last  prometheus.Gauge       // 1 when the last reload was applied (or none was tried), else 0
}

// newReloadMetrics registers the reload metrics on reg.
func newReloadMetrics(reg prometheus.Registerer) (*reloadMetrics, error) {
	m := &reloadMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emqproxy_reloads_total",
			Help: "Reloads (SIGHUP, POST /reload) by result: applied, or refused with the running configuration kept.",
		}, []string{"result"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "emqproxy_config_last_reload_successful",
			Help: "1 when the last reload was applied (or none was tried), 0 when it was refused.",
		}),
	}
	m.last.Set(1)
	for _, c := range []prometheus.Collector{m.total, m.last} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// reload re-reads the configuration (the file, the environment and the
// serve command's flags) and the map, and applies every change: the map,
// the routes, the policy (policy.*, auth.password, auth.users) and
// log.level (config.Reloadable). Connections are not dropped; commands
// already being decided finish on the old values. It is refused, with the
// running configuration kept whole, when the file does not load or
// validate, when it changes a key a reload cannot apply (named in the
// error), when the map does not load or changes what a pinned sha means
// without a new source, or when the routes do not compile. A refusal is
// logged, audited (map_refused) and counted; POST /reload also answers it.
func (d *daemon) reload() error {
	d.reloading.Lock()
	defer d.reloading.Unlock()
	changed, err := d.reloadLocked()
	if err != nil {
		d.log.Error("reload refused; the running configuration stays", zap.Error(err))
		d.reloads.total.WithLabelValues("refused").Inc()
		d.reloads.last.Set(0)
		d.audit.Info("map_refused", zap.String("map", d.fenceMap.Load().Digest), zap.String("path", d.running.Map), zap.String("error", err.Error()))
		return err
	}
	d.reloads.total.WithLabelValues("applied").Inc()
	d.reloads.last.Set(1)
	d.log.Info("reload applied", zap.Strings("changed", changed))
	return nil
}

// reloadLocked checks everything a reload needs before it changes
// anything, then swaps the new values in. It returns the changed keys.
func (d *daemon) reloadLocked() ([]string, error) {
	next, err := config.Load(d.path, d.flags)
	if err != nil {
		return nil, err
	}
	if err := config.CheckReload(d.running, next); err != nil {
		return nil, err
	}
	m, err := shamap.Load(next.Map)
	if err != nil {
		return nil, err
	}
	cur := d.srv.Policy()
	if err := checkSuccessor(cur.Map, m); err != nil {
		return nil, err
	}
	routes := routesOf(next)
	if err := d.srv.CheckRoutes(routes); err != nil {
		return nil, err
	}
	var lvl zapcore.Level
	if err := lvl.Set(next.Log.Level); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}

	// Every check passed; nothing below fails (SwapRoutes compiles what
	// CheckRoutes compiled).
	if err := d.srv.SwapRoutes(routes); err != nil {
		return nil, err
	}
	d.srv.SwapPolicy(policyFor(next, m, cur.DB))
	d.fenceMap.Store(m)
	d.level.SetLevel(lvl)
	changed := config.Changed(d.running, next)
	d.running = next
	d.log.Info("map reloaded", zap.String("old_digest", cur.Map.Digest), zap.String("digest", m.Digest))
	d.audit.Info("map", zap.String("map", m.Digest), zap.String("old_map", cur.Map.Digest),
		zap.String("path", next.Map), zap.String("source", m.Source))
	d.log.Info("routes reloaded", zap.String("routes", proxy.FormatRoutes(routes)))
	return changed, nil
}

// checkSuccessor refuses a new map that gives a sha already pinned another
// meaning (token, kind or shape) while claiming the same source.
func checkSuccessor(old, next *shamap.Map) error {
	if old.Source != next.Source {
		return nil
	}
	for _, s := range next.Scripts {
		o, ok := old.Lookup([]byte(s.SHA))
		if !ok {
			continue
		}
		if o.Verb != s.Verb || o.Read != s.Read || o.Keys != s.Keys || o.Values != s.Values {
			return fmt.Errorf("map: sha %s (%s) changes meaning but source %q is unchanged", s.SHA, s.Name, next.Source)
		}
	}
	return nil
}
