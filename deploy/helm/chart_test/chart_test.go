package charttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/infergate/infergate/runtime/app"
)

const chartDir = "../infergate"

// kubeVersion is the oldest Kubernetes the chart supports (the preStop sleep action is 1.30's).
// Helm's library (and a helm built with go tool, without the release's ldflags) defaults to 1.20.
var kubeVersion = chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

var capabilities = &chartutil.Capabilities{
	KubeVersion: kubeVersion,
	APIVersions: chartutil.DefaultVersionSet,
	HelmVersion: chartutil.DefaultCapabilities.HelmVersion,
}

// rendered is one render of the chart, decoded.
type rendered struct {
	deploy    *appsv1.Deployment
	service   *corev1.Service
	sa        *corev1.ServiceAccount
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	hpa       *autoscalingv2.HorizontalPodAutoscaler
	pdb       *policyv1.PodDisruptionBudget
	netpol    *networkingv1.NetworkPolicy
	svcMon    map[string]any
	// config is the gateway's config file as rendered (from the ConfigMap or the Secret).
	config []byte
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

func readValues(t *testing.T, name string) map[string]any {
	t.Helper()
	if name == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "examples", name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// render renders the chart with vals over its defaults, as `helm template` does.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	c := loadChart(t)
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{
		Name: "infergate", Namespace: "inference", Revision: 1, IsInstall: true,
	}, capabilities)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, rv)
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// strict decodes one YAML document into out, failing on fields the type does not have.
func strict(doc []byte, out any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func decodeAll(t *testing.T, files map[string]string) *rendered {
	t.Helper()
	r := &rendered{}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasSuffix(name, ".tpl") {
			continue
		}
		for _, doc := range docSep.Split(files[name], -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", name, err, doc)
			}
			var out any
			switch gk := meta.APIVersion + " " + meta.Kind; gk {
			case "apps/v1 Deployment":
				r.deploy = &appsv1.Deployment{}
				out = r.deploy
			case "v1 Service":
				r.service = &corev1.Service{}
				out = r.service
			case "v1 ServiceAccount":
				r.sa = &corev1.ServiceAccount{}
				out = r.sa
			case "v1 ConfigMap":
				r.configMap = &corev1.ConfigMap{}
				out = r.configMap
			case "v1 Secret":
				r.secret = &corev1.Secret{}
				out = r.secret
			case "autoscaling/v2 HorizontalPodAutoscaler":
				r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				out = r.hpa
			case "policy/v1 PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				out = r.pdb
			case "networking.k8s.io/v1 NetworkPolicy":
				r.netpol = &networkingv1.NetworkPolicy{}
				out = r.netpol
			case "monitoring.coreos.com/v1 ServiceMonitor":
				r.svcMon = map[string]any{}
				out = &r.svcMon
			default:
				t.Fatalf("%s: unexpected object %q", name, gk)
			}
			if err := strict([]byte(doc), out); err != nil {
				t.Fatalf("%s: strict decode: %v\n%s", name, err, doc)
			}
		}
	}
	if r.configMap != nil {
		r.config = []byte(r.configMap.Data["infergate.yaml"])
	}
	if r.secret != nil {
		if r.configMap != nil {
			t.Fatal("both a ConfigMap and a Secret hold the config file")
		}
		r.config = r.secret.Data["infergate.yaml"]
	}
	return r
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func renderDecoded(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	files, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decodeAll(t, files)
}

// cases are the values the chart is rendered with: its defaults and each example.
var cases = []string{"", "minimal.yaml", "production.yaml", "upstreams.yaml"}

func caseName(f string) string {
	if f == "" {
		return "defaults"
	}
	return strings.TrimSuffix(f, ".yaml")
}

func TestLint(t *testing.T) {
	for _, f := range cases {
		t.Run(caseName(f), func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, readValues(t, f), "inference", &kubeVersion)
			for _, m := range l.Messages {
				t.Log(m)
			}
			if l.HighestSeverity >= support.WarningSev {
				t.Fatalf("helm lint (strict): highest severity %d", l.HighestSeverity)
			}
		})
	}
}

// TestKubeVersion: Chart.yaml's kubeVersion admits 1.30 (the preStop sleep action) and later, not
// 1.29, so an install on an older cluster fails up front, not at the first pod's admission.
func TestKubeVersion(t *testing.T) {
	c := loadChart(t)
	for v, want := range map[string]bool{"v1.29.9": false, "v1.30.0": true, "v1.37.2": true} {
		if got := chartutil.IsCompatibleRange(c.Metadata.KubeVersion, v); got != want {
			t.Errorf("kubeVersion %q admits %s: %v, want %v", c.Metadata.KubeVersion, v, got, want)
		}
	}
}

func TestRender(t *testing.T) {
	for _, f := range cases {
		t.Run(caseName(f), func(t *testing.T) {
			vals := readValues(t, f)
			r := renderDecoded(t, vals)
			checkDeployment(t, r, vals)
			checkService(t, r)
			checkConfig(t, r, vals)
			checkOptional(t, r, f)
		})
	}
}

func checkDeployment(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	d := r.deploy
	if d == nil {
		t.Fatal("no Deployment")
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8000 || c.Ports[0].Name != "http" {
		t.Errorf("ports %+v, want one: 8000 named http", c.Ports)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/health"}, {"readiness", c.ReadinessProbe, "/v2/health/ready"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: none, or not httpGet", p.name)
			continue
		}
		if g := p.probe.HTTPGet; g.Path != p.path || g.Port.String() != "http" {
			t.Errorf("%s probe: GET %s on port %s, want GET %s on http", p.name, g.Path, g.Port.String(), p.path)
		}
	}

	drain := intValue(vals, "drainTimeout", 30)
	preStop := intValue(vals, "preStopDelay", 5)
	if !slices.Contains(c.Args, "-drain-timeout") || c.Args[slices.Index(c.Args, "-drain-timeout")+1] != fmt.Sprintf("%ds", drain) {
		t.Errorf("args %q: want -drain-timeout %ds", c.Args, drain)
	}
	for _, want := range [][2]string{{"-config", "/etc/infergate/infergate.yaml"}, {"-listen", ":8000"}} {
		if i := slices.Index(c.Args, want[0]); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != want[1] {
			t.Errorf("args %q: want %s %s", c.Args, want[0], want[1])
		}
	}
	if !slices.Contains(c.Args, "-log-json") {
		t.Errorf("args %q: want -log-json", c.Args)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("preStop: want the sleep action (the image has no shell), got %+v", c.Lifecycle)
	}
	if c.Lifecycle.PreStop.Exec != nil {
		t.Error("preStop exec: the image has no shell")
	}
	if got := c.Lifecycle.PreStop.Sleep.Seconds; got != int64(preStop) {
		t.Errorf("preStop sleep %d s, want %d", got, preStop)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= int64(drain+preStop) {
		t.Errorf("terminationGracePeriodSeconds %v, want more than drain %d + preStop %d", g, drain, preStop)
	}

	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
		t.Errorf("container securityContext %+v: want runAsNonRoot, runAsUser 65532", sc)
	} else {
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem: want true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation: want false")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("capabilities %+v: want drop ALL", sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("seccompProfile %+v: want RuntimeDefault", sc.SeccompProfile)
		}
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v: want runAsNonRoot", psc)
	}

	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
		if _, ok := vols[m.Name]; !ok {
			t.Errorf("mount %s: no volume %q", m.MountPath, m.Name)
		}
	}
	if m, ok := mounts["/tmp"]; !ok || vols[m.Name].EmptyDir == nil {
		t.Error("/tmp: want an emptyDir (the root filesystem is read-only)")
	}
	if m, ok := mounts["/etc/infergate"]; !ok || !m.ReadOnly {
		t.Error("/etc/infergate: want the config volume, read-only")
	} else {
		v := vols[m.Name]
		switch {
		case r.configMap != nil:
			if v.ConfigMap == nil || v.ConfigMap.Name != r.configMap.Name {
				t.Errorf("config volume %+v: want ConfigMap %s", v.VolumeSource, r.configMap.Name)
			}
		case r.secret != nil:
			if v.Secret == nil || v.Secret.SecretName != r.secret.Name {
				t.Errorf("config volume %+v: want Secret %s", v.VolumeSource, r.secret.Name)
			}
		}
	}
	if d.Spec.Template.Annotations["checksum/config"] == "" && r.config != nil {
		t.Error("no checksum/config annotation: a config change would not roll the pods")
	}
	if res := c.Resources; res.Requests.Cpu().IsZero() || res.Requests.Memory().IsZero() || res.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", res)
	}
	sel := d.Spec.Selector.MatchLabels
	for k, v := range sel {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod's labels", k, v)
		}
	}
}

func checkService(t *testing.T, r *rendered) {
	t.Helper()
	s := r.service
	if s == nil {
		t.Fatal("no Service")
	}
	if len(s.Spec.Ports) != 1 {
		t.Fatalf("Service ports %+v: want one (gRPC, HTTP and Connect share it)", s.Spec.Ports)
	}
	p := s.Spec.Ports[0]
	if p.Name != "http" || p.Port != 8000 || p.TargetPort.String() != "http" {
		t.Errorf("Service port %+v: want http 8000 -> http", p)
	}
	if p.AppProtocol != nil && *p.AppProtocol != "http" {
		t.Errorf("appProtocol %q: want none or http", *p.AppProtocol)
	}
	for k, v := range s.Spec.Selector {
		if r.deploy.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s selects no pod", k, v)
		}
	}
}

func checkConfig(t *testing.T, r *rendered, vals map[string]any) {
	t.Helper()
	if r.config == nil {
		t.Fatal("no config file rendered")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(r.config, &cfg); err != nil {
		t.Fatalf("config file is not YAML: %v\n%s", err, r.config)
	}
	// The gateway's own parser: the chart must never render a config the gateway refuses.
	if _, err := app.ParseConfig("chart", r.config); err != nil {
		t.Errorf("the gateway refuses the rendered config: %v\n%s", err, r.config)
	}

	for _, u := range listValue(vals, "upstreams") {
		name := u.(map[string]any)["name"]
		if !slices.ContainsFunc(listValue(cfg, "upstreams"), func(c any) bool { return c.(map[string]any)["name"] == name }) {
			t.Errorf("upstream %v missing from the config file", name)
		}
	}
	for m := range mapValue(vals, "models") {
		if _, ok := mapValue(cfg, "models")[m]; !ok {
			t.Errorf("model %s missing from the config file", m)
		}
	}
	if addr := mapValue(vals, "redis")["addr"]; addr != nil && addr != "" {
		if got := mapValue(cfg, "redis")["addr"]; got != addr {
			t.Errorf("redis.addr %v in the config file, want %v", got, addr)
		}
		if mapValue(cfg, "redis")["password"] != nil {
			t.Error("redis.password in the config file: it belongs in a Secret (INFERGATE_REDIS_PASSWORD)")
		}
	}
	if brokers := listValue(mapValue(vals, "kafka"), "brokers"); len(brokers) > 0 {
		got := listValue(mapValue(mapValue(cfg, "batch"), "kafka"), "brokers")
		if fmt.Sprint(got) != fmt.Sprint(brokers) {
			t.Errorf("batch.kafka.brokers %v in the config file, want %v", got, brokers)
		}
	}
	keys := listValue(mapValue(vals, "auth"), "keys")
	if len(keys) > 0 {
		if r.secret == nil {
			t.Error("auth.keys given but the config file is not in a Secret")
		}
		if got := listValue(mapValue(cfg, "auth"), "keys"); len(got) != len(keys) {
			t.Errorf("auth.keys: %d in the config file, want %d", len(got), len(keys))
		}
	}
	// No secret values in a ConfigMap: no API keys (even hashed), no passwords.
	if r.configMap != nil {
		for k, v := range r.configMap.Data {
			for _, bad := range []string{"sha256", "password", "keys:"} {
				if strings.Contains(v, bad) {
					t.Errorf("ConfigMap %s holds %q: secrets belong in a Secret", k, bad)
				}
			}
		}
	}
}

func checkOptional(t *testing.T, r *rendered, f string) {
	t.Helper()
	prod := f == "production.yaml"
	if (r.hpa != nil) != prod || (r.netpol != nil) != prod || (r.svcMon != nil) != prod {
		t.Errorf("HPA %v, NetworkPolicy %v, ServiceMonitor %v: want each only in production", r.hpa != nil, r.netpol != nil, r.svcMon != nil)
	}
	if (r.pdb != nil) != (f != "minimal.yaml") {
		t.Errorf("PDB rendered: %v; want one when replicas > 1 (not minimal's 1 replica)", r.pdb != nil)
	}
	if r.hpa != nil {
		if r.hpa.Spec.ScaleTargetRef.Name != r.deploy.Name || r.hpa.Spec.ScaleTargetRef.Kind != "Deployment" {
			t.Errorf("HPA targets %+v", r.hpa.Spec.ScaleTargetRef)
		}
		if r.deploy.Spec.Replicas != nil {
			t.Error("Deployment sets replicas while the HPA is on: each upgrade would reset the HPA's count")
		}
		var kinds []string
		for _, m := range r.hpa.Spec.Metrics {
			kinds = append(kinds, string(m.Type))
			if m.Pods != nil && m.Pods.Metric.Name != "infergate_guard_in_flight_requests" {
				t.Errorf("HPA Pods metric %q: the gateway exposes infergate_guard_in_flight_requests", m.Pods.Metric.Name)
			}
		}
		if !slices.Equal(kinds, []string{"Resource", "Pods"}) {
			t.Errorf("HPA metrics %v: want cpu (Resource) and in-flight (Pods)", kinds)
		}
	}
	if r.svcMon != nil {
		spec, _ := r.svcMon["spec"].(map[string]any)
		eps, _ := spec["endpoints"].([]any)
		if len(eps) == 0 {
			t.Fatal("ServiceMonitor: no endpoints")
		}
		if ep := eps[0].(map[string]any); ep["port"] != "http" || ep["path"] != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %v: want port http, path /metrics", ep)
		}
	}
	if r.netpol != nil {
		in := r.netpol.Spec.Ingress
		if len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.String() != "http" || len(in[0].From) == 0 {
			t.Errorf("NetworkPolicy ingress %+v: want port http from the selectors given", in)
		}
		if len(r.netpol.Spec.Egress) != 1 {
			t.Errorf("NetworkPolicy egress %+v: want all allowed", r.netpol.Spec.Egress)
		}
	}
	if prod {
		if r.deploy.Spec.Template.Spec.Containers[0].Env[0].Name != "INFERGATE_REDIS_PASSWORD" {
			t.Error("production: want INFERGATE_REDIS_PASSWORD from the Redis Secret")
		}
	}
}

// TestChecksumRolls: a change of the config values changes the pods' checksum annotation (so the
// Deployment rolls); a change elsewhere does not.
func TestChecksumRolls(t *testing.T) {
	sum := func(vals map[string]any) string {
		return renderDecoded(t, vals).deploy.Spec.Template.Annotations["checksum/config"]
	}
	base := sum(readValues(t, "minimal.yaml"))
	changed := readValues(t, "minimal.yaml")
	changed["upstreams"] = append(listValue(changed, "upstreams"), map[string]any{"name": "b", "url": "http://b:8000", "type": "vllm"})
	if sum(changed) == base {
		t.Error("adding an upstream left checksum/config unchanged")
	}
	changed = readValues(t, "minimal.yaml")
	changed["config"] = map[string]any{"builtin_models": false}
	if sum(changed) == base {
		t.Error("changing config left checksum/config unchanged")
	}
	changed = readValues(t, "minimal.yaml")
	changed["replicaCount"] = 4
	if sum(changed) != base {
		t.Error("changing replicaCount changed checksum/config")
	}
}

// TestExistingSecret: the config file from the user's Secret; the chart renders none.
func TestExistingSecret(t *testing.T) {
	r := renderDecoded(t, map[string]any{"auth": map[string]any{"existingSecret": "my-config", "existingSecretKey": "config.yaml"}})
	if r.configMap != nil || r.secret != nil {
		t.Error("existingSecret: the chart rendered a config file too")
	}
	var vol *corev1.Volume
	for i, v := range r.deploy.Spec.Template.Spec.Volumes {
		if v.Name == "config" {
			vol = &r.deploy.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "my-config" ||
		len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "config.yaml" || vol.Secret.Items[0].Path != "infergate.yaml" {
		t.Errorf("config volume %+v: want Secret my-config's config.yaml as infergate.yaml", vol)
	}
}

// TestRefusals: values the gateway would refuse, or that would leak a key, fail the render.
func TestRefusals(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"kafka without redis": {"kafka": map[string]any{"brokers": []any{"k:9092"}}},
		"a key, not a hash":   {"auth": map[string]any{"keys": []any{map[string]any{"name": "a", "sha256": "sk-secret"}}}},
		"existingSecret and config values": {"auth": map[string]any{"existingSecret": "s"},
			"upstreams": []any{map[string]any{"name": "a", "url": "http://a", "type": "vllm"}}},
	} {
		if _, err := render(t, vals); err == nil {
			t.Errorf("%s: rendered, want an error", name)
		}
	}
}

func intValue(vals map[string]any, key string, def int) int {
	switch v := vals[key].(type) {
	case int:
		return v
	case int64:
		return int(v)
	case float64:
		return int(v)
	}
	return def
}

func mapValue(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

func listValue(m map[string]any, key string) []any {
	v, _ := m[key].([]any)
	return v
}

func TestMain(m *testing.M) {
	// The gateway's parser applies INFERGATE_* variables: the machine's must not change the verdict.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "INFERGATE_") {
			os.Unsetenv(k)
		}
	}
	os.Exit(m.Run())
}
