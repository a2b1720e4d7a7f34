package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emqproxy/emqproxy/stand/node"
)

// TestServeUpstreamTLSVerifiesTheHostDialed runs the binary on two module
// upstreams that speak only TLS, with a CA and no server_name: one at a
// fixed address, one a master set found through a sentinel (which reaches
// it over TLS too). Each node's certificate names 127.0.0.1, so the data
// path, the fence, the control loop and the Sentinel-discovered primary
// all verify it as the host they dial. A server_name the certificate does
// not name is still refused.
func TestServeUpstreamTLSVerifiesTheHostDialed(t *testing.T) {
	node.EachServer(t, testUpstreamTLSVerifiesTheHostDialed)
}

func testUpstreamTLSVerifiesTheHostDialed(t *testing.T, srv node.Server) {
	ca := node.NewCA(t, "emqproxy test CA")
	fixed, fixedTLS := node.StartTLS(t, ca, false, node.Options{Role: node.Module, Server: srv.Path})
	found, foundTLS := node.StartTLS(t, ca, false, node.Options{Role: node.Module, Server: srv.Path})

	p := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir()}
	p.mapPath = filepath.Join(p.dir, "map.yaml")
	copyFile(t, filepath.Join(node.RepoRoot(), "stand", "map.yaml"), p.mapPath)
	_, certPEM, keyPEM := ca.Issue(t, "sentinel")
	files := map[string][]byte{"ca.pem": ca.PEM, "sentinel.pem": certPEM, "sentinel.key": keyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caFile := filepath.Join(p.dir, "ca.pem")
	sentinel := node.StartT(t, node.Options{Role: node.Bare, Server: srv.Path,
		Sentinel: &node.SentinelConfig{Master: "tlsset", Addr: foundTLS, Quorum: 1},
		Args: []string{"--tls-replication", "yes",
			"--tls-cert-file", filepath.Join(p.dir, "sentinel.pem"),
			"--tls-key-file", filepath.Join(p.dir, "sentinel.key"),
			"--tls-ca-cert-file", caFile}})

	config := func(serverName string) string {
		tlsLines := fmt.Sprintf("    tls:\n      enabled: true\n      ca: %q\n", caFile)
		if serverName != "" {
			tlsLines += fmt.Sprintf("      server_name: %q\n", serverName)
		}
		return fmt.Sprintf(`listen: %q
map: %q
upstreams:
  module-a:
    address: %q
    role: module
%s  module-s:
    role: module
    sentinel:
      master: tlsset
      addresses: [%q]
%sroutes:
  - queues: ["billing"]
    upstream: module-s
  - queues: ["*"]
    upstream: module-a
admin:
  listen: %q
control:
  enabled: true
  poll: 100ms
  lease: 1s
timeouts:
  drain: 2s
  dial: 1s
`, p.listen, p.mapPath, fixedTLS, tlsLines, sentinel.Addr, tlsLines, p.admin)
	}
	cfgPath := filepath.Join(p.dir, "emqproxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(config("")), 0o600); err != nil {
		t.Fatal(err)
	}
	p.run(t, cfgPath)
	if got := rawCommand(t, p.listen, "SET", "plain-key", "1"); got != "+OK\r\n" {
		t.Fatalf("SET through the proxy: %q", got)
	}
	if got := rawCommand(t, p.listen, "SET", "emq:{billing}:k", "2"); got != "+OK\r\n" {
		t.Fatalf("SET of a billing key through the proxy: %q", got)
	}
	if got := rawCommand(t, fixed.Addr, "GET", "plain-key"); got != "$1\r\n1\r\n" {
		t.Errorf("the fixed node holds plain-key = %q", got)
	}
	if got := rawCommand(t, found.Addr, "GET", "emq:{billing}:k"); got != "$1\r\n2\r\n" {
		t.Errorf("the Sentinel-found node holds emq:{billing}:k = %q", got)
	}
	primary := fmt.Sprintf(`emqproxy_upstream_primary{address=%q,upstream="module-s"}`, foundTLS)
	if got := p.metric(t, primary); got != 1 {
		t.Errorf("%s = %v", primary, got)
	}
	for _, up := range []string{"module-a", "module-s"} {
		lease := fmt.Sprintf(`emqproxy_control_lease{upstream=%q}`, up)
		if got := p.metric(t, lease); got != 1 {
			t.Errorf("%s = %v: the control loop holds no lease over TLS", lease, got)
		}
	}

	// server_name still decides when it is set: the certificates name
	// 127.0.0.1 and localhost, not this.
	q := &proc{listen: freeAddr(t), admin: freeAddr(t), dir: t.TempDir(), mapPath: p.mapPath}
	bad := strings.Replace(config("elsewhere.example"), p.listen, q.listen, 1)
	bad = strings.Replace(bad, p.admin, q.admin, 1)
	badPath := filepath.Join(q.dir, "emqproxy.yaml")
	if err := os.WriteFile(badPath, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	q.start(t, badPath)
	q.waitReady(t, false)
	waitLog(t, q, "elsewhere.example")
	if got := rawCommand(t, q.listen, "GET", "plain-key"); !strings.HasPrefix(got, "-UPSTREAM ") {
		t.Errorf("GET through a proxy whose server_name the certificate does not name: %q", got)
	}
}
