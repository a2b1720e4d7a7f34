package deploy_test

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/netaddr"
)

const (
	kubeUnixDir   = "kubernetes-unix"
	kubeUnixPatch = "kubernetes-unix/deployment-patch.yaml"
	unixDropIn    = "systemd/unix-socket.conf"
)

// unixPod is what the Unix socket layout's checks read of a Deployment.
type unixPod struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Template struct {
			Spec struct {
				SecurityContext struct {
					FSGroup *int64 `yaml:"fsGroup"`
				} `yaml:"securityContext"`
				InitContainers []unixContainer `yaml:"initContainers"`
				Containers     []unixContainer `yaml:"containers"`
				Volumes        []struct {
					Name     string `yaml:"name"`
					EmptyDir *struct {
						Medium string `yaml:"medium"`
					} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type unixContainer struct {
	Name string `yaml:"name"`
	Env  []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		ContainerPort int `yaml:"containerPort"`
	} `yaml:"ports"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func (c unixContainer) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// mountOf returns the volume mounted at dir or above it, and its path.
func (c unixContainer) mountOf(dir string) (volume, at string) {
	for _, m := range c.VolumeMounts {
		if dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return m.Name, m.MountPath
		}
	}
	return "", ""
}

// kubeUnixPod is the Unix socket layout's Deployment: rendered by kubectl
// kustomize over the base when kubectl is installed, else the patch alone
// (which holds every part checked below but the pod's fsGroup).
func kubeUnixPod(t *testing.T) (p unixPod, rendered bool) {
	t.Helper()
	data := readFile(t, kubeUnixPatch)
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "kustomize", kubeUnixDir).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", kubeUnixDir, err, out)
		}
		for _, doc := range strings.Split(string(out), "\n---\n") {
			if strings.Contains(doc, "kind: Deployment") {
				data, rendered = []byte(doc), true
			}
		}
	}
	if err := yaml.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return p, rendered
}

// loadWithEnv loads the configuration file body with the variables set.
func loadWithEnv(t *testing.T, body string, env map[string]string) *config.Config {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	p := filepath.Join(t.TempDir(), "emqproxy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p, nil)
	if err != nil {
		t.Fatalf("the configuration with %v: %v", env, err)
	}
	return cfg
}

// TestKubernetesUnixSocketLayout: the sidecar listens on a Unix socket
// only, on an emptyDir both containers mount at the same path; the
// application is pointed at that path; the mode lets the pod's fsGroup in.
func TestKubernetesUnixSocketLayout(t *testing.T) {
	pod, rendered := kubeUnixPod(t)
	spec := pod.Spec.Template.Spec
	var sidecar, app *unixContainer
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == "emqproxy" {
			sidecar = &spec.InitContainers[i]
		}
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == "app" {
			app = &spec.Containers[i]
		}
	}
	if sidecar == nil || app == nil {
		t.Fatalf("no emqproxy init container or app container in %s", kubeUnixDir)
	}
	env := map[string]string{"EMQPROXY_LISTEN": sidecar.env("EMQPROXY_LISTEN"), "EMQPROXY_LISTEN_MODE": sidecar.env("EMQPROXY_LISTEN_MODE")}
	loaded := loadManifests(t)
	cfg := loadWithEnv(t, loaded.configMap.Data["emqproxy.yaml"], env)
	addrs := cfg.ListenAddrs()
	if len(addrs) != 1 || !netaddr.IsUnix(addrs[0]) {
		t.Fatalf("listen %q: want one Unix socket, no TCP listener", addrs)
	}
	_, sock := netaddr.Split(addrs[0])
	vol, sidecarAt := sidecar.mountOf(path.Dir(sock))
	if vol == "" {
		t.Fatalf("the socket %s is on no volume of the sidecar", sock)
	}
	appVol, appAt := app.mountOf(path.Dir(sock))
	if appVol != vol || appAt != sidecarAt {
		t.Errorf("the application mounts %q at %q, the sidecar %q at %q: both must mount the socket's volume at the same path", appVol, appAt, vol, sidecarAt)
	}
	emptyDir := false
	for _, v := range spec.Volumes {
		emptyDir = emptyDir || v.Name == vol && v.EmptyDir != nil
	}
	if !emptyDir {
		t.Errorf("volume %s is not an emptyDir of the pod", vol)
	}
	if url := app.env("REDIS_URL"); !strings.Contains(url, sock) {
		t.Errorf("the application's REDIS_URL %q does not name the socket %s", url, sock)
	}
	if m := cfg.SocketMode(); m&0o060 != 0o060 || m&0o007 != 0 {
		t.Errorf("listen_mode %#o: want the group (the pod's fsGroup) to connect and no one else", m)
	}
	if !rendered {
		t.Log("kubectl is not installed: the patch was checked alone")
		return
	}
	if spec.SecurityContext.FSGroup == nil {
		t.Error("the pod sets no fsGroup: a container running as another user could not reach the socket")
	}
	for _, p := range sidecar.Ports {
		if p.ContainerPort == 6380 {
			t.Error("the sidecar still declares the TCP client port 6380")
		}
	}
}

// TestSystemdUnixSocketDropIn: the drop-in's listen has the socket in the
// unit's RuntimeDirectory (the one place ProtectSystem=strict lets it
// write besides its logs), a static non-root user and a group for the
// applications, and a configuration that loads.
func TestSystemdUnixSocketDropIn(t *testing.T) {
	u := parseUnit(t, readFile(t, unixDropIn))
	env := map[string]string{}
	for _, v := range u["Service"]["Environment"] {
		k, val, _ := strings.Cut(strings.Trim(v, `"`), "=")
		env[k] = val
	}
	cfg := loadWithEnv(t, string(readFile(t, productionExample)), env)
	runDir, _ := u.last("Service", "RuntimeDirectory")
	if runDir == "" {
		t.Fatalf("%s sets no RuntimeDirectory", unixDropIn)
	}
	unix := 0
	for _, a := range cfg.ListenAddrs() {
		if !netaddr.IsUnix(a) {
			continue
		}
		unix++
		if _, p := netaddr.Split(a); path.Dir(p) != path.Join("/run", runDir) {
			t.Errorf("socket %s is not in /run/%s, the unit's RuntimeDirectory", p, runDir)
		}
	}
	if unix != 1 {
		t.Errorf("listen %q: want one Unix socket", cfg.ListenAddrs())
	}
	user, _ := u.last("Service", "User")
	group, _ := u.last("Service", "Group")
	if user == "" || user == "root" || user == "0" || group == "" || group == "root" || group == "0" {
		t.Errorf("User=%q Group=%q: want a non-root user and the applications' group", user, group)
	}
	if mode, _ := u.last("Service", "RuntimeDirectoryMode"); mode != "0750" {
		t.Errorf("RuntimeDirectoryMode=%q, want 0750 (the group enters, others not)", mode)
	}
	if m := cfg.SocketMode(); m&0o060 != 0o060 || m&0o007 != 0 {
		t.Errorf("listen_mode %#o: want the group to connect and no one else", m)
	}
}
