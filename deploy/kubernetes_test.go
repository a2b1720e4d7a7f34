package deploy_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/emqproxy/emqproxy/admin"
	"github.com/emqproxy/emqproxy/config"
	"github.com/emqproxy/emqproxy/shamap"
)

const kubeDir = "kubernetes"

// The parts of the manifests the wiring checks read.
type (
	object struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Metadata   metadata `yaml:"metadata"`
	}
	metadata struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	deployment struct {
		object `yaml:",inline"`
		Spec   struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Template struct {
				Metadata metadata `yaml:"metadata"`
				Spec     podSpec  `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int64          `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               securityContext `yaml:"securityContext"`
		InitContainers                []container     `yaml:"initContainers"`
		Containers                    []container     `yaml:"containers"`
		Volumes                       []struct {
			Name      string `yaml:"name"`
			ConfigMap *struct {
				Name  string `yaml:"name"`
				Items []struct {
					Key  string `yaml:"key"`
					Path string `yaml:"path"`
				} `yaml:"items"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	securityContext struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	}
	container struct {
		Name          string   `yaml:"name"`
		Image         string   `yaml:"image"`
		RestartPolicy string   `yaml:"restartPolicy"`
		Args          []string `yaml:"args"`
		Ports         []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				SecretKeyRef *struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
		} `yaml:"volumeMounts"`
		StartupProbe   *probe `yaml:"startupProbe"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		Resources      struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext securityContext `yaml:"securityContext"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	configMap struct {
		object `yaml:",inline"`
		Data   map[string]string `yaml:"data"`
	}
	podMonitor struct {
		object `yaml:",inline"`
		Spec   struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			PodMetricsEndpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
)

// manifests are the documents of deploy/kubernetes, as kustomize lists them.
type manifests struct {
	objects    int // documents with a kind, in every resource file
	deployment deployment
	configMap  configMap
	podMonitor podMonitor
}

// env returns the value of a container's plain environment variable.
func (c container) env(name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

// port resolves a probe port (a number or a port name) to a number.
func (c container) port(p any) int {
	switch v := p.(type) {
	case int:
		return v
	case string:
		for _, cp := range c.Ports {
			if cp.Name == v {
				return cp.ContainerPort
			}
		}
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}

func (c container) hasPort(n int) bool {
	return slices.ContainsFunc(c.Ports, func(p struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	}) bool {
		return p.ContainerPort == n
	})
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	var kust struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(kubeDir, "kustomization.yaml")), &kust); err != nil {
		t.Fatal(err)
	}
	m := &manifests{}
	kinds := map[string]int{}
	for _, res := range kust.Resources {
		dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join(kubeDir, res))))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			var obj object
			if err := doc.Decode(&obj); err != nil {
				t.Fatalf("%s: %v", res, err)
			}
			if obj.Kind == "" {
				continue
			}
			m.objects++
			kinds[obj.Kind]++
			var target any
			switch obj.Kind {
			case "Deployment":
				target = &m.deployment
			case "ConfigMap":
				target = &m.configMap
			case "PodMonitor":
				target = &m.podMonitor
			default:
				continue
			}
			if err := doc.Decode(target); err != nil {
				t.Fatalf("%s: %s: %v", res, obj.Kind, err)
			}
		}
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "PodMonitor"} {
		if kinds[kind] != 1 {
			t.Fatalf("%s holds %d %s objects, want 1", kubeDir, kinds[kind], kind)
		}
	}
	return m
}

// sidecar finds the emqproxy container: the one whose args start with serve.
func (m *manifests) sidecar(t *testing.T) container {
	t.Helper()
	spec := m.deployment.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if len(c.Args) > 0 && c.Args[0] == "serve" {
			return c
		}
	}
	t.Fatal("no container runs `emqproxy serve`")
	return container{}
}

// mountedFiles maps each file path the sidecar sees to the ConfigMap key
// that holds it.
func (m *manifests) mountedFiles(t *testing.T, c container) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, vm := range c.VolumeMounts {
		for _, v := range m.deployment.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			if v.ConfigMap.Name != m.configMap.Metadata.Name {
				t.Errorf("volume %s mounts ConfigMap %q; the manifests define %q", v.Name, v.ConfigMap.Name, m.configMap.Metadata.Name)
			}
			keyToPath := map[string]string{}
			for _, it := range v.ConfigMap.Items {
				if _, ok := m.configMap.Data[it.Key]; !ok {
					t.Errorf("volume %s projects key %q, which ConfigMap %s does not hold", v.Name, it.Key, m.configMap.Metadata.Name)
				}
				keyToPath[it.Key] = it.Path
			}
			if len(v.ConfigMap.Items) == 0 {
				for k := range m.configMap.Data {
					keyToPath[k] = k
				}
			}
			for key, p := range keyToPath {
				if vm.SubPath != "" {
					if vm.SubPath == p {
						files[vm.MountPath] = key
					}
					continue
				}
				files[path.Join(vm.MountPath, p)] = key
			}
		}
	}
	return files
}

// sidecarConfig loads the configuration the sidecar is started with, from
// the ConfigMap, and returns it with the mounted files.
func (m *manifests) sidecarConfig(t *testing.T) (container, *config.Config, map[string]string) {
	t.Helper()
	c := m.sidecar(t)
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("sidecar args %q have no --config FILE", c.Args)
	}
	files := m.mountedFiles(t, c)
	key, ok := files[c.Args[i+1]]
	if !ok {
		t.Fatalf("--config %s is not a mounted file; mounted: %v", c.Args[i+1], files)
	}
	return c, loadConfigBytes(t, []byte(m.configMap.Data[key])), files
}

func portOf(t *testing.T, key, addr string) (host string, port int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return h, n
}

func TestKubernetesConfigAndMapLoad(t *testing.T) {
	m := loadManifests(t)
	_, cfg, files := m.sidecarConfig(t)
	mapKey, ok := files[cfg.Map]
	if !ok {
		t.Fatalf("the config's map %q is not a mounted file; mounted: %v", cfg.Map, files)
	}
	// Every ConfigMap key is a file the sidecar reads.
	for key := range m.configMap.Data {
		if !slices.Contains(mapsValues(files), key) {
			t.Errorf("ConfigMap key %q is not mounted into the sidecar", key)
		}
	}
	p := filepath.Join(t.TempDir(), filepath.Base(cfg.Map))
	if err := os.WriteFile(p, []byte(m.configMap.Data[mapKey]), 0o600); err != nil {
		t.Fatal(err)
	}
	mp, err := shamap.Load(p)
	if err != nil {
		t.Fatalf("the map in ConfigMap key %s: %v", mapKey, err)
	}
	if len(mp.Scripts) == 0 {
		t.Error("the map in the ConfigMap pins no script")
	}
}

func mapsValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestKubernetesMapIsStandMap: the ConfigMap ships the stand's pinned map,
// byte for byte, so its digest is the one the tests and benchmarks use.
func TestKubernetesMapIsStandMap(t *testing.T) {
	m := loadManifests(t)
	_, cfg, files := m.sidecarConfig(t)
	key, ok := files[cfg.Map]
	if !ok {
		t.Fatalf("the config's map %q is not a mounted file", cfg.Map)
	}
	want := readFile(t, filepath.Join(repoRoot, "stand", "map.yaml"))
	got := []byte(m.configMap.Data[key])
	if !bytes.Equal(got, want) {
		// The map is the ConfigMap's last entry.
		t.Errorf("ConfigMap key %s differs from stand/map.yaml; copy it in with\n"+
			"  sed -i '/^  %s: |$/q' deploy/kubernetes/configmap.yaml && sed 's/^/    /' stand/map.yaml >> deploy/kubernetes/configmap.yaml", key, key)
	}
	a, errA := shamap.Parse(got)
	b, errB := shamap.Parse(want)
	if errA == nil && errB == nil && a.Digest != b.Digest {
		t.Errorf("digests differ: ConfigMap %s, stand %s", a.Digest, b.Digest)
	}
}

func TestKubernetesPortsAndProbes(t *testing.T) {
	m := loadManifests(t)
	sc, cfg, _ := m.sidecarConfig(t)
	_, listenPort := portOf(t, "listen", cfg.Listen)
	adminHost, adminPort := portOf(t, "admin.listen", cfg.Admin.Listen)
	if !sc.hasPort(listenPort) {
		t.Errorf("sidecar does not declare containerPort %d (listen %s)", listenPort, cfg.Listen)
	}
	if !sc.hasPort(adminPort) {
		t.Errorf("sidecar does not declare containerPort %d (admin.listen %s)", adminPort, cfg.Admin.Listen)
	}
	// Probes come from the kubelet to the pod IP, and Prometheus scrapes it.
	if ip := net.ParseIP(adminHost); adminHost != "" && (ip == nil || !ip.IsUnspecified()) {
		t.Errorf("admin.listen %s is not reachable from the kubelet; bind 0.0.0.0", cfg.Admin.Listen)
	}

	// The probe paths are served by the admin handler.
	srv := httptest.NewServer(admin.Handler(admin.Options{Registry: prometheus.NewRegistry(), Ready: func() error { return nil }}))
	defer srv.Close()
	probes := []struct {
		name string
		p    *probe
		path string
	}{
		{"startupProbe", sc.StartupProbe, "/healthz"},
		{"livenessProbe", sc.LivenessProbe, "/healthz"},
		{"readinessProbe", sc.ReadinessProbe, "/readyz"},
	}
	for _, pr := range probes {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("sidecar has no HTTP %s", pr.name)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			t.Errorf("%s path %q, want %q", pr.name, pr.p.HTTPGet.Path, pr.path)
		}
		if got := sc.port(pr.p.HTTPGet.Port); got != adminPort {
			t.Errorf("%s port %v is %d, admin.listen is %s", pr.name, pr.p.HTTPGet.Port, got, cfg.Admin.Listen)
		}
		resp, err := http.Get(srv.URL + pr.p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("admin handler answers %s (%s) with %d", pr.p.HTTPGet.Path, pr.name, resp.StatusCode)
		}
	}

	// Scrape annotations and the PodMonitor point at the admin port.
	ann := m.deployment.Spec.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(adminPort) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v do not point at :%d/metrics", ann, adminPort)
	}
	pm := m.podMonitor
	if pm.APIVersion != "monitoring.coreos.com/v1" {
		t.Errorf("PodMonitor apiVersion %q", pm.APIVersion)
	}
	for k, v := range pm.Spec.Selector.MatchLabels {
		if m.deployment.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s; the pod template does not carry it", k, v)
		}
	}
	if len(pm.Spec.PodMetricsEndpoints) == 0 {
		t.Fatal("PodMonitor has no endpoint")
	}
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if sc.port(ep.Port) != adminPort || ep.Path != "/metrics" {
			t.Errorf("PodMonitor endpoint %s%s is not the admin port's /metrics", ep.Port, ep.Path)
		}
	}
	for k, v := range m.deployment.Spec.Selector.MatchLabels {
		if m.deployment.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("Deployment selector %s=%s does not match its pod template", k, v)
		}
	}
}

func TestKubernetesApplicationUsesSidecar(t *testing.T) {
	m := loadManifests(t)
	sc, cfg, _ := m.sidecarConfig(t)
	var apps int
	for _, c := range m.deployment.Spec.Template.Spec.Containers {
		if c.Name == sc.Name {
			continue
		}
		apps++
		var points bool
		for _, e := range c.Env {
			points = points || strings.Contains(e.Value, cfg.Listen)
		}
		if !points {
			t.Errorf("application container %s has no env pointing at the sidecar's listen %s", c.Name, cfg.Listen)
		}
	}
	if apps == 0 {
		t.Error("no application container next to the sidecar")
	}
	// The native sidecar outlives the application at shutdown.
	if slices.ContainsFunc(m.deployment.Spec.Template.Spec.InitContainers, func(c container) bool { return c.Name == sc.Name }) && sc.RestartPolicy != "Always" {
		t.Errorf("sidecar %s is an init container without restartPolicy: Always", sc.Name)
	}
	grace := m.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil || float64(*grace) <= cfg.Timeouts.Drain.Seconds() {
		t.Errorf("terminationGracePeriodSeconds %v must exceed timeouts.drain %s", grace, cfg.Timeouts.Drain)
	}
}

func TestKubernetesUpstreamPasswordFromSecret(t *testing.T) {
	m := loadManifests(t)
	sc, _, files := m.sidecarConfig(t)
	var refs int
	for _, e := range sc.Env {
		name, ok := strings.CutPrefix(e.Name, "EMQPROXY_UPSTREAMS_")
		if !ok || !strings.HasSuffix(name, "_PASSWORD") {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s is not taken from a Secret", e.Name)
			continue
		}
		refs++
		t.Run(e.Name, func(t *testing.T) {
			t.Setenv(e.Name, "from-the-secret")
			_, cfg, _ := m.sidecarConfig(t)
			var overridden []string
			for n, u := range cfg.Upstreams {
				if u.Password == "from-the-secret" {
					overridden = append(overridden, n)
				}
			}
			if len(overridden) != 1 {
				t.Errorf("%s overrides the password of upstreams %v, want exactly one; "+
					"the upstream must carry `password: \"\"` in %v for viper to see the override", e.Name, overridden, files)
			}
		})
	}
	if refs == 0 {
		t.Error("no EMQPROXY_UPSTREAMS_<NAME>_PASSWORD taken from a Secret")
	}
}

// cpuCores parses a Kubernetes CPU quantity ("1", "500m", "1.5").
func cpuCores(t *testing.T, q string) float64 {
	t.Helper()
	if m, ok := strings.CutSuffix(q, "m"); ok {
		n, err := strconv.ParseFloat(m, 64)
		if err != nil {
			t.Fatalf("cpu %q: %v", q, err)
		}
		return n / 1000
	}
	n, err := strconv.ParseFloat(q, 64)
	if err != nil {
		t.Fatalf("cpu %q: %v", q, err)
	}
	return n
}

func TestKubernetesResourcesAndSecurity(t *testing.T) {
	m := loadManifests(t)
	sc, cfg, _ := m.sidecarConfig(t)
	for _, r := range []string{"cpu", "memory"} {
		if sc.Resources.Requests[r] == "" || sc.Resources.Limits[r] == "" {
			t.Errorf("sidecar has no %s request and limit", r)
		}
	}
	limit := cpuCores(t, sc.Resources.Limits["cpu"])
	if limit < 0.5 || limit > 2 {
		t.Errorf("sidecar cpu limit %v; it is sized for about one core", limit)
	}
	want := int(math.Ceil(limit))
	if cfg.Runtime.GOMAXPROCS != want {
		t.Errorf("runtime.gomaxprocs %d does not match the cpu limit %v", cfg.Runtime.GOMAXPROCS, limit)
	}
	if v, _ := sc.env("GOMAXPROCS"); v != strconv.Itoa(cfg.Runtime.GOMAXPROCS) {
		t.Errorf("GOMAXPROCS env %q, runtime.gomaxprocs %d", v, cfg.Runtime.GOMAXPROCS)
	}

	pod := m.deployment.Spec.Template.Spec.SecurityContext
	csc := sc.SecurityContext
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(csc.RunAsNonRoot) && !isTrue(pod.RunAsNonRoot) {
		t.Error("sidecar may run as root: set runAsNonRoot")
	}
	for _, u := range []*int64{pod.RunAsUser, csc.RunAsUser} {
		if u != nil && *u == 0 {
			t.Error("runAsUser 0")
		}
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		t.Error("sidecar root filesystem is writable")
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("sidecar allows privilege escalation")
	}
	if !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Error("sidecar keeps capabilities: drop ALL")
	}
	if cfg.Audit.Sink != "stdout" && cfg.Audit.Sink != "stderr" && !strings.HasPrefix(cfg.Audit.Sink, "/") {
		t.Errorf("audit.sink %q: with a read-only root filesystem use stdout, stderr or a mounted volume", cfg.Audit.Sink)
	}
}

// TestKubernetesKustomizeBuilds renders the kustomization with kubectl, when
// it is installed, and checks it yields the objects the other tests read.
func TestKubernetesKustomizeBuilds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed; the manifests were checked file by file above")
	}
	out, err := exec.Command(kubectl, "kustomize", kubeDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", kubeDir, err, out)
	}
	var kinds []string
	for _, doc := range decodeAll(t, out) {
		kinds = append(kinds, doc["kind"].(string))
	}
	slices.Sort(kinds)
	if want := []string{"ConfigMap", "Deployment", "PodMonitor"}; !slices.Equal(kinds, want) {
		t.Errorf("kubectl kustomize renders %v, want %v", kinds, want)
	}
	if n := loadManifests(t).objects; n != len(kinds) {
		t.Errorf("kustomize renders %d objects, the resource files hold %d", len(kinds), n)
	}
}
