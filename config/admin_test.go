package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The admin token comes from admin.token (its variable
// EMQPROXY_ADMIN_TOKEN) or admin.token_file; a short one, or both keys at
// once, are refused naming the key, never printing the token.
func TestAdminToken(t *testing.T) {
	load := func(extra string) (*Config, error) {
		t.Helper()
		return Load(writeConfig(t, minimal+extra), nil)
	}
	c, err := load("")
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := c.AdminToken(); tok != "" || err != nil {
		t.Errorf("no token configured: %q %v", tok, err)
	}

	t.Setenv("EMQPROXY_ADMIN_TOKEN", "from-the-environment-1")
	if c, err = load(""); err != nil {
		t.Fatal(err)
	}
	if tok, _ := c.AdminToken(); tok != "from-the-environment-1" {
		t.Errorf("EMQPROXY_ADMIN_TOKEN not read: %q", tok)
	}
	t.Setenv("EMQPROXY_ADMIN_TOKEN", "")

	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-the-file-0123456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = load("admin:\n  token_file: " + file + "\n"); err != nil {
		t.Fatal(err)
	}
	if tok, err := c.AdminToken(); tok != "from-the-file-0123456" || err != nil {
		t.Errorf("token file: %q %v", tok, err)
	}

	for _, tc := range []struct{ extra, key string }{
		{"admin:\n  token: tiny-tok\n", "admin.token"},
		{"admin:\n  token: \"has a space in it here\"\n", "admin.token"},
		{"admin:\n  token: long-enough-token-1234\n  token_file: " + file + "\n", "admin.token"},
	} {
		_, err := load(tc.extra)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.key) || strings.Contains(err.Error(), "tiny-tok") {
			t.Errorf("%q: %v; want %s named", tc.extra, err, tc.key)
		}
	}
	if err := os.WriteFile(file, []byte("tiny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ = load("admin:\n  token_file: " + file + "\n")
	if _, err := c.AdminToken(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "admin.token_file") || strings.Contains(err.Error(), "tiny") {
		t.Errorf("short token file: %v", err)
	}
	c, _ = load("admin:\n  token_file: " + file + ".missing\n")
	if _, err := c.AdminToken(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "admin.token_file") {
		t.Errorf("missing token file: %v", err)
	}
}
