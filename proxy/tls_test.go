package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/emqproxy/emqproxy/fence"
	"github.com/emqproxy/emqproxy/netaddr"
	"github.com/emqproxy/emqproxy/resp"
	"github.com/emqproxy/emqproxy/stand/node"
)

// tlsDo dials addr with cfg, sends PING and returns the reply, or the
// error of the handshake or the read.
func tlsDo(addr string, cfg *tls.Config) (string, error) {
	d := &net.Dialer{Timeout: testTimeout}
	network, address := netaddr.Split(addr) // host:port or unix:/path
	c, err := tls.DialWithDialer(d, network, address, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	if _, err := c.Write(resp.AppendCommand(nil, "PING")); err != nil {
		return "", err
	}
	r, err := resp.ReadReply(bufio.NewReader(c))
	return string(r), err
}

func TestTLSClientListener(t *testing.T) {
	n := node.StartT(t, node.Options{Role: node.Bare})
	ca, other := node.NewCA(t, "emqproxy test CA"), node.NewCA(t, "someone else")
	serverCert, _, _ := ca.Issue(t, "proxy")
	clientCert, _, _ := ca.Issue(t, "client")
	strangerCert, _, _ := other.Issue(t, "stranger")

	h := startProxy(t, n, func(o *Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	})
	good := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"}
	if r, err := tlsDo(h.addr, good); err != nil || r != "+PONG\r\n" {
		t.Errorf("TLS client with the CA: %q, %v", r, err)
	}
	tls12 := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12}
	if r, err := tlsDo(h.addr, tls12); err != nil || r != "+PONG\r\n" {
		t.Errorf("TLS 1.2 client: %q, %v", r, err)
	}
	if _, err := tlsDo(h.addr, &tls.Config{ServerName: "127.0.0.1"}); err == nil {
		t.Error("a client that does not trust the CA connected")
	} else {
		t.Logf("untrusted server certificate: %v", err)
	}
	old := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	if _, err := tlsDo(h.addr, old); err == nil {
		t.Error("a TLS 1.1 client connected")
	} else {
		t.Logf("TLS 1.1 client: %v", err)
	}
	// A plain client gets no reply, only a closed connection.
	plain := dial(t, h.addr)
	plain.send(cmd("PING"))
	if b, err := resp.ReadReply(plain.br); err == nil {
		t.Errorf("a plain client got %q", b)
	}

	// With client certificates required.
	m := startProxy(t, n, func(o *Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12,
			ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	})
	if r, err := tlsDo(m.addr, good); err == nil {
		t.Errorf("a client without a certificate got %q", r)
	} else {
		t.Logf("no client certificate: %v", err)
	}
	withStranger := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{strangerCert}}
	if r, err := tlsDo(m.addr, withStranger); err == nil {
		t.Errorf("a client with a certificate of another CA got %q", r)
	}
	withCert := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{clientCert}}
	if r, err := tlsDo(m.addr, withCert); err != nil || r != "+PONG\r\n" {
		t.Errorf("a client with a certificate: %q, %v", r, err)
	}

	// valkey-go over TLS through the proxy.
	vc, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{m.addr}, DialCtxFn: netaddr.DialValkey, TLSConfig: withCert,
		AlwaysRESP2: true, DisableCache: true})
	if err != nil {
		t.Fatalf("valkey-go over TLS: %v", err)
	}
	defer vc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := vc.Do(ctx, vc.B().Set().Key("tls-k").Value("tls-v").Build()).Error(); err != nil {
		t.Errorf("SET over TLS: %v", err)
	}
	if v, err := vc.Do(ctx, vc.B().Get().Key("tls-k").Build()).ToString(); err != nil || v != "tls-v" {
		t.Errorf("GET over TLS: %q, %v", v, err)
	}
}

func TestTLSRedisCLIThroughTheProxy(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli is not installed")
	}
	n := node.StartT(t, node.Options{Role: node.Bare})
	ca := node.NewCA(t, "emqproxy test CA")
	serverCert, _, _ := ca.Issue(t, "proxy")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, n, func(o *Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	})
	_, port, _ := net.SplitHostPort(h.addr)
	if netaddr.IsUnix(h.addr) {
		t.Skip("this test gives redis-cli -h and -p")
	}
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		out, _ := exec.CommandContext(ctx, cli, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	if out := run("--tls", "--cacert", caFile, "PING"); out != "PONG" {
		t.Errorf("redis-cli --tls: %q", out)
	}
	if out := run("--tls", "--cacert", caFile, "SET", "cli", "tls"); out != "OK" {
		t.Errorf("redis-cli --tls SET: %q", out)
	}
	if out := run("PING"); out == "PONG" {
		t.Error("redis-cli without TLS got PONG")
	} else {
		t.Logf("redis-cli without TLS: %q", out)
	}
	if out := run("--tls", "PING"); out == "PONG" {
		t.Error("redis-cli without the CA got PONG")
	}
	if v, _ := node.RawDo(n.Addr, "GET", "cli"); string(v) != "$3\r\ntls\r\n" {
		t.Errorf("the node holds %q", v)
	}
}

func TestTLSToTheUpstream(t *testing.T) {
	ca := node.NewCA(t, "emqproxy test CA")
	n, tlsAddr := node.StartTLS(t, ca, true, node.Options{Role: node.Bare})
	proxyCert, _, _ := ca.Issue(t, "emqproxy")
	upTLS := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{proxyCert}}
	h := startProxy(t, n, func(o *Options) {
		o.Upstream.Address = tlsAddr
		o.Upstream.TLSConfig = upTLS
	})
	c := h.dial()
	c.do("SET", "over-tls", "1").is("+OK\r\n")
	c.do("SUBSCRIBE", "tls-ch").is("*3\r\n$9\r\nsubscribe\r\n$6\r\ntls-ch\r\n:1\r\n")
	dial(t, n.Addr).do("PUBLISH", "tls-ch", "m").is(":1\r\n")
	c.read().is("*3\r\n$7\r\nmessage\r\n$6\r\ntls-ch\r\n$1\r\nm\r\n")
	b := h.dial()
	b.send(cmd("BLPOP", "tls-list", "0"))
	dial(t, n.Addr).do("RPUSH", "tls-list", "x").is(":1\r\n")
	b.read().is("*2\r\n$8\r\ntls-list\r\n$1\r\nx\r\n")
	// The node saw the proxy's connections arrive on its TLS port.
	admin := dial(t, n.Addr)
	admin.do("GET", "over-tls").is("$1\r\n1\r\n")
	tlsPort := tlsAddr[strings.LastIndexByte(tlsAddr, ':'):]
	if list := string(admin.do("CLIENT", "LIST").got); !strings.Contains(list, "laddr=127.0.0.1"+tlsPort) {
		t.Errorf("no client on the TLS port %s:\n%s", tlsPort, list)
	}

	// Without a client certificate the node refuses the proxy; a plain
	// connection to the TLS port fails too. Neither proxy becomes ready.
	// (With TLS 1.3 the refusal of a client certificate, and with a plain
	// connection the TLS port's close, show at the first reply: the fence
	// hook, which every real configuration has, is where; PING stands in
	// for it here.)
	ping := func(ctx context.Context, c fence.Conn) error {
		r, err := c.Do(ctx, "PING")
		if err == nil && r.IsError() {
			err = errors.New(r.Str)
		}
		return err
	}
	noCert := &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	for name, cfg := range map[string]*tls.Config{"no client certificate": noCert, "plain": nil} {
		p := startProxyNoWait(t, n, func(o *Options) {
			o.Upstream.Address = tlsAddr
			o.Upstream.TLSConfig = cfg
			o.Upstream.DialTimeout = time.Second
			o.OnConnect = ping
		})
		poll(t, name+": an upstream error", func() bool {
			err := p.srv.Upstream().LastError()
			return err != nil && !strings.Contains(err.Error(), "not connected yet")
		})
		if p.srv.Ready() {
			t.Errorf("%s: ready", name)
		}
		t.Logf("%s: %v", name, p.srv.Upstream().LastError())
		dial(t, p.addr).do("GET", "over-tls").hasPrefix("-UPSTREAM node unavailable: ")
	}
}
