package node

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// portChildEnv makes the test binary a second process of the stand that
// takes ports and prints them (TestFreePortAcrossProcesses).
const portChildEnv = "EMQPROXY_PORT_CHILD"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(portChildEnv)); err == nil {
		for range n {
			p, err := FreePort()
			if err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(2)
			}
			os.Stdout.WriteString(strconv.Itoa(p) + "\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	lo, hi, ok := stablePorts()
	if !ok {
		t.Skip("the ephemeral range leaves no room below it on this machine")
	}
	for p := range takePorts(t, 200) {
		if p < lo || p > hi {
			t.Fatalf("port %d outside the stand's range %d-%d", p, lo, hi)
		}
	}
	// Nothing listening on a port the stand holds gets it from the kernel.
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if p >= lo && p <= hi {
			t.Fatalf("the kernel handed out port %d, inside the stand's range %d-%d", p, lo, hi)
		}
	}
}

func TestFreePortAcrossProcesses(t *testing.T) {
	if _, _, ok := stablePorts(); !ok {
		t.Skip("the ephemeral range leaves no room below it on this machine")
	}
	held := takePorts(t, 300)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^$")
	cmd.Env = append(os.Environ(), portChildEnv+"=300")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("second process: %v", err)
	}
	got := strings.Fields(string(out))
	if len(got) != 300 {
		t.Fatalf("second process took %d ports, want 300", len(got))
	}
	for _, s := range got {
		p, _ := strconv.Atoi(s)
		if held[p] {
			t.Fatalf("port %d, held by this process, was handed to another", p)
		}
	}
}

func TestReleasePort(t *testing.T) {
	Long(t)
	lo, hi, ok := stablePorts()
	if !ok {
		t.Skip("the ephemeral range leaves no room below it on this machine")
	}
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if reserve(portDir(), p) {
		t.Fatalf("port %d, held, reserved again", p)
	}
	ReleasePort(p)
	if !reserve(portDir(), p) {
		t.Fatalf("port %d still held after ReleasePort", p)
	}
	ReleasePort(p)
	ReleasePort(p) // a port no longer held: ignored
	// Taking and giving back more ports than the range holds never runs
	// out of it (a test binary run with -count=N).
	for range 2 * (hi - lo + 1) / 500 {
		for p := range takePorts(t, 500) {
			ReleasePort(p)
		}
	}
}

// takePorts takes n ports with FreePort; none may come twice. They are
// given back at the test's cleanup.
func takePorts(t *testing.T, n int) map[int]bool {
	t.Helper()
	taken := map[int]bool{}
	t.Cleanup(func() {
		for p := range taken {
			ReleasePort(p)
		}
	})
	for range n {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("port %d handed out twice in one process", p)
		}
		taken[p] = true
	}
	return taken
}
