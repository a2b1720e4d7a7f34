package verify

import "testing"

func TestParseServerInfo(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		version    string
		cached     bool
	}{
		{"redis 7.0", "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n", "redis 7.0.15", false},
		{"redis 6.2", "redis_version:6.2.14\r\nrun_id:abc\r\n", "redis 6.2.14", false},
		{"redis 7.2", "redis_version:7.2.4\r\nrun_id:abc\r\n", "redis 7.2.4", true},
		{"redis 8", "redis_version:8.0.0\r\nrun_id:abc\r\n", "redis 8.0.0", true},
		{"valkey 8", "redis_version:7.2.4\r\nvalkey_version:8.0.1\r\nrun_id:abc\r\n", "valkey 8.0.1", true},
	} {
		info, err := parseServerInfo(tc.text)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if info.Version != tc.version || info.CachedClock != tc.cached || info.RunID != "abc" {
			t.Errorf("%s: got %+v, want version %q cached %v", tc.name, info, tc.version, tc.cached)
		}
	}
	if _, err := parseServerInfo("redis_version:7.0.15\r\n"); err == nil {
		t.Error("INFO without run_id accepted")
	}
}
