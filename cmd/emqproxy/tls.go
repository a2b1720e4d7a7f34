package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/emqproxy/emqproxy/config"
)

// listenerTLS builds the client listener's TLS configuration, or nil when
// TLS is off.
func listenerTLS(c config.ListenerTLS) (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: minVersion(c.MinVersion)}
	if c.ClientCA != "" {
		pool, err := loadPool(c.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls.client_ca: %w", err)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// upstreamTLS builds the TLS configuration for connections to an upstream,
// or nil when TLS is off for it.
func upstreamTLS(name string, c config.UpstreamTLS) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CA != "" {
		pool, err := loadPool(c.CA)
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.tls.ca: %w", name, err)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("upstreams.%s.tls: %w", name, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func minVersion(v string) uint16 {
	if v == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
