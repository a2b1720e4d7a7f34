package config

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestListenForms(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		env        map[string]string
		want       []string
		mode       fs.FileMode
	}{
		{name: "tcp only (the default)", body: minimal, want: []string{"127.0.0.1:6380"}, mode: 0o660},
		{name: "unix instead of tcp", body: minimal + "listen: unix:/run/emqproxy/emqproxy.sock\n",
			want: []string{"unix:/run/emqproxy/emqproxy.sock"}, mode: 0o660},
		{name: "both, a yaml list", body: minimal + "listen:\n  - 127.0.0.1:6380\n  - unix:/run/e.sock\nlisten_mode: \"0600\"\n",
			want: []string{"127.0.0.1:6380", "unix:/run/e.sock"}, mode: 0o600},
		{name: "both, comma-separated", body: minimal + "listen: \"127.0.0.1:6380, unix:/run/e.sock\"\n",
			want: []string{"127.0.0.1:6380", "unix:/run/e.sock"}, mode: 0o660},
		{name: "both, from the environment", body: minimal,
			env:  map[string]string{"EMQPROXY_LISTEN": "unix:/run/e.sock,127.0.0.1:7000", "EMQPROXY_LISTEN_MODE": "0666"},
			want: []string{"unix:/run/e.sock", "127.0.0.1:7000"}, mode: 0o666},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := Load(writeConfig(t, tc.body), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ListenAddrs(); !slices.Equal(got, tc.want) {
				t.Errorf("ListenAddrs = %q, want %q", got, tc.want)
			}
			if got := c.SocketMode(); got != tc.mode {
				t.Errorf("SocketMode = %#o, want %#o", got, tc.mode)
			}
		})
	}
}

func TestListenRefused(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"relative path", "listen: unix:run/e.sock\n", `listen: "unix:run/e.sock"`},
		{"no path", "listen: \"unix:\"\n", `listen: "unix:"`},
		{"not an address", "listen: localhost\n", `listen: "localhost" is not host:port or unix:/path/to.sock`},
		{"twice", "listen: [unix:/run/e.sock, unix:/run/e.sock]\n", `"unix:/run/e.sock" is given twice`},
		{"empty", "listen: \"\"\n", "listen: is empty"},
		{"path too long", "listen: unix:/" + strings.Repeat("d", 120) + "\n", "bytes, over the 107"},
		{"bare number mode", "listen_mode: 0660\n", `quote the mode`},
		{"not octal", "listen_mode: \"0680\"\n", `listen_mode: "0680" is not an octal mode`},
		{"beyond the permission bits", "listen_mode: \"4770\"\n", `bits beyond 0777`},
		{"owner locked out", "listen: unix:/run/e.sock\nlisten_mode: \"0066\"\n", "0600 at least"},
		{"upstream address", "upstreams:\n  module-a:\n    address: unix:relative.sock\n    role: module\nroutes:\n  - queues: [\"*\"]\n    upstream: module-a\n",
			`upstreams.module-a.address: "unix:relative.sock": the socket's path must be absolute`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := minimal + tc.body
			if strings.HasPrefix(tc.body, "upstreams:") {
				body = tc.body
			}
			_, err := Load(writeConfig(t, body), nil)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

func TestUnixUpstreamAddress(t *testing.T) {
	body := strings.Replace(minimal, `"127.0.0.1:6390"`, `"unix:/run/valkey/valkey.sock"`, 1)
	c, err := Load(writeConfig(t, body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Upstreams["module-a"].Address; got != "unix:/run/valkey/valkey.sock" {
		t.Errorf("address = %q", got)
	}
}
