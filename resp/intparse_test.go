package resp

import "testing"

func TestParseIntIsString2ll(t *testing.T) {
	good := map[string]int64{"0": 0, "1": 1, "-1": -1, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63}
	for in, want := range good {
		if got, ok := ParseInt([]byte(in)); !ok || got != want {
			t.Errorf("ParseInt(%q) = %d, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-", "+1", "01", "-0", "1a", " 1", "9223372036854775808", "-9223372036854775809", "99999999999999999999"} {
		if _, ok := ParseInt([]byte(in)); ok {
			t.Errorf("ParseInt(%q) accepted", in)
		}
	}
}
