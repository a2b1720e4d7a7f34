package deploy_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// operationsDoc is the operators' runbook.
var operationsDoc = filepath.Join(repoRoot, "docs", "operations.md")

// TestOperationsDocMetrics: the runbook names only metrics the proxy
// registers, and documents each one.
func TestOperationsDocMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	if len(registered) == 0 {
		t.Skipf("no emqproxy metric is declared in %v yet", metricPackages)
	}
	doc := string(readFile(t, operationsDoc))
	mentioned := map[string]bool{}
	for _, n := range metricRef.FindAllString(doc, -1) {
		base := n
		if b, ok := strings.CutSuffix(n, "_bucket"); ok && registered[b] == histogramMetric {
			base = b
		}
		mentioned[base] = true
		if _, ok := registered[base]; !ok {
			t.Errorf("docs/operations.md names %s, which the proxy does not register", n)
		}
	}
	for name := range registered {
		if !strings.Contains(doc, "| `"+name) {
			t.Errorf("docs/operations.md has no row for %s in its metrics table", name)
		}
	}
}

// cliInvocation is one emqproxy command line an operator is told to run.
type cliInvocation struct {
	where string
	args  []string // after "emqproxy"
}

var inlineCommand = regexp.MustCompile("`emqproxy ([^`]+)`")

// docInvocations collects the emqproxy command lines of the runbook: lines
// of its code blocks and inline code spans.
func docInvocations(t *testing.T) []cliInvocation {
	t.Helper()
	var out []cliInvocation
	doc := string(readFile(t, operationsDoc))
	for _, m := range inlineCommand.FindAllStringSubmatch(doc, -1) {
		out = append(out, cliInvocation{where: "docs inline `emqproxy " + m[1] + "`", args: strings.Fields(m[1])})
	}
	inBlock := false
	var cont strings.Builder
	sc := bufio.NewScanner(strings.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock {
			continue
		}
		if c, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(c + " ")
			continue
		}
		cont.WriteString(line)
		full := cont.String()
		cont.Reset()
		full = strings.TrimPrefix(full, "# or: ")
		if rest, ok := strings.CutPrefix(full, "emqproxy "); ok {
			if i := strings.Index(rest, "#"); i >= 0 {
				rest = rest[:i]
			}
			out = append(out, cliInvocation{where: "docs/operations.md:" + strconv.Itoa(n), args: strings.Fields(rest)})
		}
	}
	return out
}

// deployInvocations collects the emqproxy command lines the deployment
// artifacts run: the systemd unit, the Kubernetes sidecar, the image's CMD.
func deployInvocations(t *testing.T) []cliInvocation {
	t.Helper()
	var out []cliInvocation
	u := parseUnit(t, readFile(t, unitFile))
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		for _, v := range u["Service"][key] {
			f := strings.Fields(v)
			if len(f) > 0 && filepath.Base(f[0]) == "emqproxy" {
				out = append(out, cliInvocation{where: unitFile + " " + key, args: f[1:]})
			}
		}
	}
	out = append(out, cliInvocation{where: "the Kubernetes sidecar's args", args: loadManifests(t).sidecar(t).Args})
	return out
}

var subcommandWord = regexp.MustCompile(`^[a-z]+$`)

// TestCommandLinesExist runs `emqproxy <subcommand> --help` for every
// command line the runbook and the deployment artifacts give, and checks
// each flag they use is one the subcommand has.
func TestCommandLinesExist(t *testing.T) {
	bin := emqproxyBinary(t)
	invs := append(docInvocations(t), deployInvocations(t)...)
	if len(invs) < 10 {
		t.Fatalf("found only %d emqproxy command lines; the scan is broken", len(invs))
	}
	helps := map[string]string{}
	for _, inv := range invs {
		var sub, flags []string
		for i, a := range inv.args {
			if strings.HasPrefix(a, "-") {
				break
			}
			if !subcommandWord.MatchString(a) {
				break
			}
			sub = inv.args[:i+1]
		}
		for _, a := range inv.args {
			if strings.HasPrefix(a, "--") {
				name, _, _ := strings.Cut(a, "=")
				flags = append(flags, name)
			}
		}
		key := strings.Join(sub, " ")
		help, ok := helps[key]
		if !ok {
			out, err := exec.Command(bin, append(slices.Clone(sub), "--help")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: `emqproxy %s --help`: %v\n%s", inv.where, key, err, out)
				helps[key] = ""
				continue
			}
			help = string(out)
			if !strings.Contains(help, "emqproxy "+key) {
				t.Errorf("%s: `emqproxy %s` is not a command (help shows another):\n%s", inv.where, key, help)
			}
			helps[key] = help
		}
		if help == "" {
			continue
		}
		for _, f := range flags {
			if f == "--help" {
				continue
			}
			if !strings.Contains(help, f+" ") && !strings.Contains(help, f+"\n") && !strings.Contains(help, f+"=") {
				t.Errorf("%s: `emqproxy %s` has no flag %s", inv.where, key, f)
			}
		}
	}
}
