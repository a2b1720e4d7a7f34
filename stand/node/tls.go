package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority made by a test, for nodes and clients
// that speak TLS on loopback.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte         // the CA's certificate
	Pool *x509.CertPool // holding only the CA
}

// NewCA makes a self-signed CA, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: pool}
}

// Issue makes a certificate signed by the CA for loopback (server and
// client use), with its PEM encodings.
func (ca *CA) Issue(t testing.TB, name string) (pair tls.Certificate, certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

// StartTLS starts a node of opts that also listens with TLS on a port of
// its own (a certificate from ca; clients must present one of ca's when
// authClients), stopped at cleanup and both ports given back. It returns
// the TLS address. A server built without TLS (the stand's Valkey) skips
// the test.
func StartTLS(t *testing.T, ca *CA, authClients bool, opts Options) (*Node, string) {
	t.Helper()
	_, certPEM, keyPEM := ca.Issue(t, "redis")
	dir := t.TempDir()
	files := map[string][]byte{"ca.pem": ca.PEM, "server.pem": certPEM, "server.key": keyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, err := FreePort() // the TLS listener's
	if err != nil {
		t.Fatal(err)
	}
	auth := "no"
	if authClients {
		auth = "yes"
	}
	opts.Args = append(append([]string(nil), opts.Args...),
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", auth,
	)
	n, err := Start(opts)
	if err != nil {
		ReleasePort(port)
		if strings.Contains(err.Error(), "tls") || strings.Contains(err.Error(), "TLS") {
			t.Skipf("this server does not serve TLS: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.retire()
		ReleasePort(port)
	})
	return n, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
