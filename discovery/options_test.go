package discovery

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string // a part of the error; "" = valid
	}{
		{"valid", Options{Master: "emq", Addresses: []string{"127.0.0.1:26379", "[::1]:26380"}}, ""},
		{"no master", Options{Addresses: []string{"127.0.0.1:26379"}}, "no master name"},
		{"no sentinel", Options{Master: "emq"}, "no sentinel address"},
		{"not host:port", Options{Master: "emq", Addresses: []string{"127.0.0.1"}}, `"127.0.0.1" is not host:port`},
		{"twice", Options{Master: "emq", Addresses: []string{"a:1", "a:1"}}, "a:1 given twice"},
		{"negative timeout", Options{Master: "emq", Addresses: []string{"a:1"}, Timeout: -time.Second}, "negative timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate = %v, want ErrOptions with %q", err, tc.want)
			}
			if r, err := New(tc.opts, nil); r != nil || !errors.Is(err, ErrOptions) {
				t.Fatalf("New = %v, %v; want ErrOptions", r, err)
			}
		})
	}
}

func TestParseSwitch(t *testing.T) {
	cases := []struct {
		msg  string
		addr string
		ok   bool
	}{
		{"emq 127.0.0.1 6379 127.0.0.1 6380", "127.0.0.1:6380", true},
		{"emq ::1 6379 ::1 6380", "[::1]:6380", true},
		{"other 127.0.0.1 6379 127.0.0.1 6380", "", false},
		{"emq 127.0.0.1 6379", "", false},
		{"", "", false},
	}
	for _, tc := range cases {
		addr, ok := parseSwitch("emq", tc.msg)
		if addr != tc.addr || ok != tc.ok {
			t.Errorf("parseSwitch(%q) = %q, %v; want %q, %v", tc.msg, addr, ok, tc.addr, tc.ok)
		}
	}
}

func TestClientOption(t *testing.T) {
	sentinelTLS, nodeTLS := &tls.Config{ServerName: "sentinel"}, &tls.Config{ServerName: "node"}
	o := Options{
		Master: "emq", Addresses: []string{"s1:26379", "s2:26379"},
		Username: "su", Password: "sp", TLSConfig: sentinelTLS,
		Node: NodeAuth{Username: "nu", Password: "np", TLSConfig: nodeTLS},
	}
	c := o.ClientOption()
	if !slices.Equal(c.InitAddress, o.Addresses) || c.Sentinel.MasterSet != "emq" {
		t.Fatalf("addresses %v master %q", c.InitAddress, c.Sentinel.MasterSet)
	}
	if c.Username != "nu" || c.Password != "np" || c.TLSConfig != nodeTLS {
		t.Fatalf("node auth %q %q %v", c.Username, c.Password, c.TLSConfig)
	}
	if c.Sentinel.Username != "su" || c.Sentinel.Password != "sp" || c.Sentinel.TLSConfig != sentinelTLS {
		t.Fatalf("sentinel auth %q %q %v", c.Sentinel.Username, c.Sentinel.Password, c.Sentinel.TLSConfig)
	}
	if c.Sentinel.TopologyRefreshInterval != DefaultRefresh || c.Dialer.Timeout != DefaultDialTimeout {
		t.Fatalf("refresh %v dial %v", c.Sentinel.TopologyRefreshInterval, c.Dialer.Timeout)
	}
	o.Refresh = -1
	if got := o.ClientOption().Sentinel.TopologyRefreshInterval; got != 0 {
		t.Fatalf("refresh off: TopologyRefreshInterval %v, want 0", got)
	}
	c.InitAddress[0] = "changed"
	if o.Addresses[0] != "s1:26379" {
		t.Fatal("ClientOption shares the caller's address slice")
	}
}
