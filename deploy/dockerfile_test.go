package deploy_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/emqproxy/emqproxy/config"
)

// The image itself cannot be built here: no container engine runs on the
// machines the tests run on. These tests check the Dockerfile's text, and
// run its build command with the local Go toolchain to prove that command
// yields a static, version-stamped binary.

const dockerfile = "Dockerfile"

// instruction is one Dockerfile instruction with its continuation lines joined.
type instruction struct {
	op   string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, dockerfile)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{op: strings.ToUpper(op), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// stages splits the instructions at each FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.op == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

// goBuild returns the RUN argument that builds the binary.
func goBuild(t *testing.T, stage []instruction) string {
	t.Helper()
	for _, in := range stage {
		if in.op == "RUN" && strings.Contains(in.args, "go build") {
			return in.args
		}
	}
	t.Fatal("the build stage has no RUN ... go build")
	return ""
}

func TestDockerfileShape(t *testing.T) {
	st := stages(parseDockerfile(t))
	if len(st) != 2 {
		t.Fatalf("%d stages, want a builder and a final stage", len(st))
	}
	builder, final := st[0], st[1]
	from := strings.Fields(builder[0].args)
	if len(from) != 3 || from[0] != "golang:1.26" || !strings.EqualFold(from[1], "AS") {
		t.Errorf("builder is FROM %q, want golang:1.26 AS <name>", builder[0].args)
	}
	builderName := from[len(from)-1]
	build := goBuild(t, builder)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=", "./cmd/emqproxy"} {
		if !strings.Contains(build, want) {
			t.Errorf("go build %q lacks %s", build, want)
		}
	}

	base := final[0].args
	if base != "scratch" && !strings.HasPrefix(base, "gcr.io/distroless/static") {
		t.Errorf("final stage is FROM %s, want distroless static or scratch", base)
	}
	ops := map[string][]string{}
	for _, in := range final {
		ops[in.op] = append(ops[in.op], in.args)
	}
	if len(ops["USER"]) == 0 {
		t.Error("the final stage sets no USER")
	}
	for _, u := range ops["USER"] {
		if name, _, _ := strings.Cut(u, ":"); name == "0" || name == "root" {
			t.Errorf("USER %s is root", u)
		}
	}
	if !slices.ContainsFunc(ops["COPY"], func(a string) bool { return strings.Contains(a, "--from="+builderName) }) {
		t.Errorf("the final stage copies nothing from %s", builderName)
	}
	var exposed []string
	for _, e := range ops["EXPOSE"] {
		exposed = append(exposed, strings.Fields(e)...)
	}
	defaults := config.Defaults()
	for _, key := range []string{"listen", "admin.listen"} {
		_, port := portOf(t, key, defaults[key].(string))
		if !slices.Contains(exposed, strconv.Itoa(port)) {
			t.Errorf("EXPOSE %v lacks %d, the default %s port", exposed, port, key)
		}
	}
	if len(ops["ENTRYPOINT"]) != 1 || !strings.Contains(ops["ENTRYPOINT"][0], "emqproxy") {
		t.Errorf("ENTRYPOINT %v does not run emqproxy", ops["ENTRYPOINT"])
	}

	// The image's default command is the one the Kubernetes sidecar runs,
	// and its user the one the pod runs as.
	m := loadManifests(t)
	sc := m.sidecar(t)
	wantCmd := `["` + strings.Join(sc.Args, `", "`) + `"]`
	if len(ops["CMD"]) != 1 || ops["CMD"][0] != wantCmd {
		t.Errorf("CMD %v, the sidecar runs %s", ops["CMD"], wantCmd)
	}
	if u := m.deployment.Spec.Template.Spec.SecurityContext.RunAsUser; u != nil && len(ops["USER"]) > 0 {
		if uid, _, _ := strings.Cut(ops["USER"][0], ":"); uid != strconv.FormatInt(*u, 10) {
			t.Errorf("USER %s, the pod runs as %d", ops["USER"][0], *u)
		}
	}
}

// shellWords splits a simple shell command line: blanks separate words,
// double quotes group, ${NAME} is expanded from vars.
func shellWords(s string, vars map[string]string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case c == '$' && i+1 < len(s) && s[i+1] == '{':
			end := strings.IndexByte(s[i:], '}')
			cur.WriteString(vars[s[i+2:i+end]])
			i += end
			inWord = true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// builtBinary is emqproxy built by the Dockerfile's own go build command,
// once per test run, with dockerfileVersion stamped in.
var builtBinary struct {
	once sync.Once
	path string
	err  error
}

const dockerfileVersion = "v0.0.0-dockerfile-test"

// emqproxyBinary builds emqproxy with the Dockerfile's build command and the
// local toolchain, and returns its path.
func emqproxyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the emqproxy binary; skipped with -short")
	}
	st := stages(parseDockerfile(t))
	builtBinary.once.Do(func() { builtBinary.path, builtBinary.err = buildLikeDockerfile(goBuild(t, st[0])) })
	if builtBinary.err != nil {
		t.Fatal(builtBinary.err)
	}
	return builtBinary.path
}

func buildLikeDockerfile(run string) (string, error) {
	words := shellWords(run, map[string]string{"VERSION": dockerfileVersion})
	var env []string
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env = append(env, words[0])
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return "", fmt.Errorf("cannot read the build command %q", words)
	}
	out := filepath.Join(testDir, "emqproxy")
	args := slices.Clone(words[2:])
	i := slices.Index(args, "-o")
	if i < 0 || i+1 >= len(args) {
		return "", fmt.Errorf("the build command has no -o: %q", words)
	}
	args[i+1] = out
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %q: %v\n%s", args, err, b)
	}
	return out, nil
}

// TestDockerfileBuildCommand runs the Dockerfile's go build with the local
// toolchain and checks the binary is static and reports the stamped version.
func TestDockerfileBuildCommand(t *testing.T) {
	bin := emqproxyBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader (PT_INTERP): it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v: it is not static", libs)
	}

	got, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("emqproxy version: %v\n%s", err, got)
	}
	if want := "emqproxy " + dockerfileVersion; strings.TrimSpace(string(got)) != want {
		t.Errorf("emqproxy version = %q, want %q", strings.TrimSpace(string(got)), want)
	}
}
