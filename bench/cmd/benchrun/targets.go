package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// proxyKind says which program serves a proxy target.
type proxyKind int

const (
	kindBinary proxyKind = iota // bin/emqproxy serve --config FILE
	kindProxyd                  // bench/cmd/proxyd (audit truly off possible)
)

// proxySpec is one proxy instance to start.
type proxySpec struct {
	name       string
	kind       proxyKind
	gomaxprocs int    // 0 = Go's default
	audit      string // a file path, or "off" (proxyd only)
	pprof      bool
	capture    string // a capture directory: every queue captured (binary only)
	// upstream is the node's address ("" = the run's module node);
	// upstreamKeys are more keys of the upstream's section (binary only),
	// each line indented as under upstreams.module-a.
	upstream     string
	upstreamKeys string
	// unix, when set, is a Unix socket's path the proxy listens on beside
	// its TCP address (binary only).
	unix string
}

// binaryServes reports whether the emqproxy binary has a working serve command.
func (r *runner) binaryServes() bool {
	if _, err := os.Stat(r.proxyBin); err != nil {
		return false
	}
	return exec.Command(r.proxyBin, "serve", "--help").Run() == nil
}

// startProxy starts one proxy in front of the module node.
func (r *runner) startProxy(s proxySpec) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin := ""
	if s.pprof {
		if admin, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	var env []string
	if s.gomaxprocs > 0 {
		env = append(env, fmt.Sprintf("GOMAXPROCS=%d", s.gomaxprocs))
	}
	mapPath := filepath.Join(r.root, "stand", "map.yaml")
	upstream := s.upstream
	if upstream == "" {
		upstream = r.module.Addr
	}
	var p *proc
	switch s.kind {
	case kindBinary:
		cfg := filepath.Join(r.tmp, safeName(s.name)+".yaml")
		var b strings.Builder
		if s.unix != "" {
			fmt.Fprintf(&b, "listen: [%q, %q]\nmap: %q\n", addr, "unix:"+s.unix, mapPath)
		} else {
			fmt.Fprintf(&b, "listen: %q\nmap: %q\n", addr, mapPath)
		}
		fmt.Fprintf(&b, "upstreams:\n  module-a:\n    address: %q\n    role: module\n%s", upstream, s.upstreamKeys)
		fmt.Fprintf(&b, "routes:\n  - queues: [\"*\"]\n    upstream: module-a\n")
		fmt.Fprintf(&b, "audit:\n  sink: %q\nlog:\n  level: warn\n", s.audit)
		if admin != "" {
			fmt.Fprintf(&b, "admin:\n  listen: %q\n  pprof: true\n", admin)
		} else {
			fmt.Fprintf(&b, "admin:\n  listen: \"\"\n")
		}
		if s.capture != "" {
			fmt.Fprintf(&b, "capture:\n  queues: [\"*\"]\n  dir: %q\n  max_bytes: %d\n", s.capture, int64(8)<<30)
		}
		if s.gomaxprocs > 0 {
			fmt.Fprintf(&b, "runtime:\n  gomaxprocs: %d\n", s.gomaxprocs)
			env = append(env, fmt.Sprintf("EMQPROXY_RUNTIME_GOMAXPROCS=%d", s.gomaxprocs))
		}
		if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		r.configs = append(r.configs, namedText{s.name + " (" + filepath.Base(cfg) + ")", b.String()})
		p, err = r.startProc(s.name, addr, proxyReady, env, r.proxyBin, "serve", "--config", cfg)
	case kindProxyd:
		argv := []string{r.proxydBin, "--listen", addr, "--upstream", upstream, "--map", mapPath, "--audit", s.audit}
		if admin != "" {
			argv = append(argv, "--pprof", admin)
		}
		p, err = r.startProc(s.name, addr, proxyReady, env, argv...)
	}
	if err != nil {
		return nil, err
	}
	r.admin[p.name] = admin
	return p, nil
}

// twemUnixSocket is the Unix socket of startTwemproxy's second pool.
func (r *runner) twemUnixSocket() string { return filepath.Join(r.tmp, "nutcracker.sock") }

// startTwemproxy starts nutcracker with one pool in front of the module
// node: redis protocol, one server connection.
func (r *runner) startTwemproxy() (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	stats, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`bench:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: true
  server_connections: 1
  auto_eject_hosts: false
  timeout: 10000
  servers:
    - %s:1
benchunix:
  listen: %s 0666
  hash: fnv1a_64
  distribution: ketama
  redis: true
  server_connections: 1
  auto_eject_hosts: false
  timeout: 10000
  servers:
    - %s:1
`, addr, r.module.Addr, r.twemUnixSocket(), r.module.Addr)
	path := filepath.Join(r.tmp, "nutcracker.yml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	r.configs = append(r.configs, namedText{"twemproxy (nutcracker.yml)", conf})
	host, port, _ := strings.Cut(stats, ":")
	return r.startProc("twemproxy", addr, answersPing, nil, r.nutcracker, "-c", path, "-a", host, "-s", port,
		"-o", filepath.Join(r.tmp, "nutcracker.out"), "-v", "4")
}
