package ollaconfig

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/upstream"
	"go.yaml.in/yaml/v3"
)

var envRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)

var update = flag.Bool("update", false, "rewrite the expected *.infergate.yaml files")

// TestConvertFiles converts real Olla config files (and mixed.yaml) and compares the output with
// the exact expected infergate config, which must also load as infergate's config does.
func TestConvertFiles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range files {
		if strings.HasSuffix(in, ".infergate.yaml") {
			continue
		}
		n++
		t.Run(filepath.Base(in), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Convert(src)
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			want := strings.TrimSuffix(in, ".yaml") + ".infergate.yaml"
			if *update {
				if err := os.WriteFile(want, r.YAML, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			exp, err := os.ReadFile(want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.YAML, exp) {
				t.Errorf("output differs from %s:\n%s", want, r.YAML)
			}
			loadLikeInfergate(t, r.YAML)
			// Every note is one line naming its setting.
			for _, n := range r.Notes {
				if strings.Contains(n, "\n") || !strings.Contains(n, ": ") {
					t.Errorf("note not one line naming its setting: %q", n)
				}
			}
		})
	}
	if n < 6 {
		t.Fatalf("only %d input files in testdata", n)
	}
}

// loadLikeInfergate decodes a converted config the way runtime/app's ParseConfig does (unknown keys
// are errors) and validates its upstreams with the same function, the ${VAR}s it references set.
func loadLikeInfergate(t *testing.T, data []byte) {
	t.Helper()
	// The subset of runtime/app's Config the conversion writes: a key outside it fails here as
	// it would fail there.
	var c struct {
		Upstreams []upstream.Endpoint `yaml:"upstreams"`
		Server    struct {
			IdleTimeout yaml.Node `yaml:"idle_timeout"`
		} `yaml:"server"`
		Compat struct {
			OllaHeaders bool `yaml:"olla_headers"`
		} `yaml:"compat"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("infergate cannot decode the output: %v\n%s", err, data)
	}
	if !c.Compat.OllaHeaders {
		t.Fatalf("an Olla user's config must turn Olla's headers on: their tools read them\n%s", data)
	}
	// infergate expands ${VAR} at load time; here each reference stands for a set variable.
	for _, u := range c.Upstreams {
		for k, v := range u.Headers {
			u.Headers[k] = envRef.ReplaceAllString(v, "x")
		}
	}
	if err := upstream.Validate(c.Upstreams); err != nil {
		t.Fatalf("infergate rejects the upstreams: %v\n%s", err, data)
	}
}

func TestConvertMixedDetails(t *testing.T) {
	src, err := os.ReadFile("testdata/mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Convert(src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Listen != "0.0.0.0:8080" {
		t.Errorf("Listen = %q", r.Listen)
	}
	var c struct {
		Upstreams []upstream.Endpoint `yaml:"upstreams"`
	}
	if err := yaml.Unmarshal(r.YAML, &c); err != nil {
		t.Fatal(err)
	}
	by := map[string]upstream.Endpoint{}
	for _, u := range c.Upstreams {
		by[u.Name] = u
	}
	checks := []struct{ what, got, want string }{
		{"gpu-1 header default dropped", by["gpu-1"].Headers["X-Team"], "${TEAM}"},
		{"sglang type", by["gpu-2"].Type, "sglang"},
		{"sglang health: its type's default", by["gpu-2"].HealthCheckURL, ""},
		{"token file", by["gpu-2"].Headers["Authorization"], "Bearer ${OLLA_GPU_2_TOKEN}"},
		{"basic literal", by["ollama"].Headers["Authorization"], "Basic b2xsYTpzM2NyZXQ="},
		{"basic from env", by["behind-router"].Headers["Authorization"], "Basic ${OLLA_BEHIND_ROUTER_BASIC_AUTH}"},
		{"api key header", by["lmstudio"].Headers["X-Key"], "${LMS_KEY}"},
		{"path dropped without preserve_path", by["lmstudio"].URL, "http://lms.lan:1234"},
		{"health keeps Olla's path", by["lmstudio"].HealthCheckURL, "/api/v1/v1/models"},
		{"preserve_path keeps the path", by["behind-router"].URL, "https://gw.lan/llm"},
		{"preserved health", by["behind-router"].HealthCheckURL, "/healthz"},
		{"lemonade under /api", by["lemonade"].URL, "http://lemonade.lan:8000/api"},
		{"lemonade health", by["lemonade"].HealthCheckURL, "/v1/health"},
		{"dmr under /engines", by["dmr"].URL, "http://dmr.lan:12434/engines"},
		{"dmr absolute health made relative", by["dmr"].HealthCheckURL, ""},
		{"alias on ollama", by["ollama"].Aliases["my-llama"], "llama3.1:8b"},
		{"alias on vllm", by["gpu-1"].Aliases["my-llama"], "meta-llama/Llama-3.1-8B-Instruct"},
		{"alias on lmstudio", by["lmstudio"].Aliases["my-llama"], "llama-3.1-8b-instruct"},
		{"alias on llamacpp", by["llamacpp"].Aliases["my-llama"], "Meta-Llama-3.1-8B-Instruct.gguf"},
		{"one-name alias everywhere", by["gpu-1"].Aliases["coder"], "qwen2.5-coder:7b"},
		{"check interval", by["llamacpp"].CheckInterval.String(), "30s"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %q, want %q", c.what, c.got, c.want)
		}
	}
	if got := by["ollama"].Models; len(got) != 2 || got[0] != "llama3.1:8b" {
		t.Errorf("exact model_filter -> models: %v", got)
	}
	if len(by["lmstudio"].Models) != 0 {
		t.Errorf("a glob model_filter must not become an allow-list: %v", by["lmstudio"].Models)
	}
	// least-connections ignores priority in Olla: one tier here.
	for _, u := range c.Upstreams {
		if u.Priority != 100 {
			t.Errorf("%s: priority %d under least-connections, want one tier (100)", u.Name, u.Priority)
		}
	}
	wantNotes := []string{
		"discovery.static.endpoints[1] (gpu-2).priority: 50: Olla's least-connections balancer ignores priority",
		"discovery.static.endpoints[0] (gpu-1).headers.X-Team: ${TEAM:-infra}: infergate has no ${VAR:-default}",
		"set OLLA_GPU_2_TOKEN to the file's contents",
		"model_aliases.my-llama: [llama3.1:8b meta-llama/Llama-3.1-8B-Instruct llama-3.1-8b-instruct Meta-Llama-3.1-8B-Instruct.gguf]: infergate maps an alias to one name per endpoint",
		"discovery.static.endpoints[3] (lmstudio).model_filter: include [], exclude [*embed*]",
		"server.host: 0.0.0.0: infergate takes its address from -listen",
	}
	all := strings.Join(r.Notes, "\n")
	for _, w := range wantNotes {
		if !strings.Contains(all, w) {
			t.Errorf("no note containing %q in:\n%s", w, all)
		}
	}
	if strings.Contains(all, "server.idle_timeout") {
		t.Errorf("server.idle_timeout converts exactly and needs no note")
	}
	if !bytes.Contains(r.YAML, []byte("server:\n  idle_timeout: 1m30s\n")) {
		t.Errorf("server.idle_timeout not converted:\n%s", r.YAML)
	}
}

// TestPriorityBalancerKeepsTiers: under Olla's priority balancer, higher is preferred, as in
// infergate, so the values carry over unchanged.
func TestPriorityBalancerKeepsTiers(t *testing.T) {
	t.Parallel()
	r, err := Convert([]byte(`
proxy: {load_balancer: priority}
discovery:
  static:
    endpoints:
      - {url: "http://a:8000", name: a, type: vllm, priority: 100}
      - {url: "http://b:8000", name: b, type: vllm, priority: 50}
      - {url: "http://c:8000", name: c, type: vllm, priority: 0}
      - {url: "http://d:8000", name: d, type: vllm}
`))
	if err != nil {
		t.Fatal(err)
	}
	var c struct{ Upstreams []upstream.Endpoint }
	if err := yaml.Unmarshal(r.YAML, &c); err != nil {
		t.Fatal(err)
	}
	want := []int{100, 50, 0, 100} // an omitted priority is Olla's default, 100
	for i, u := range c.Upstreams {
		if u.Priority != want[i] {
			t.Errorf("%s: priority %d, want %d", u.Name, u.Priority, want[i])
		}
	}
}

func TestDefaultsAndEmpty(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "# only a comment\n", "server: {port: 1234}\n"} {
		r, err := Convert([]byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if !bytes.Contains(r.YAML, []byte("url: http://localhost:11434")) {
			t.Errorf("%q: Olla's built-in endpoint missing:\n%s", src, r.YAML)
		}
		loadLikeInfergate(t, r.YAML)
	}
	r, err := Convert([]byte("discovery: {static: {endpoints: []}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(r.YAML, []byte("upstreams: []")) {
		t.Errorf("an empty endpoint list must stay empty:\n%s", r.YAML)
	}
}

func TestConvertErrors(t *testing.T) {
	t.Parallel()
	ep := func(s string) string { return "discovery:\n  static:\n    endpoints:\n      - " + s + "\n" }
	cases := []struct{ name, in, want string }{
		{"malformed", "server: [1, 2\n", "olla config: yaml:"},
		{"not a mapping", "- a\n- b\n", "the top level must be a mapping"},
		{"unknown top key", "sever:\n  port: 1\n", "sever: line 1: unknown key"},
		{"unknown nested key", "proxy:\n  retry:\n    enabld: true\n", "proxy.retry.enabld: line 3: unknown key"},
		{"unknown endpoint key", ep(`{url: "http://a", name: a, type: vllm, nmae: x}`), "discovery.static.endpoints[0].nmae: line 4: unknown key"},
		{"unknown auth key", ep(`{url: "http://a", name: a, type: vllm, auth: {type: bearer, tokn: x}}`), "discovery.static.endpoints[0].auth.tokn"},
		{"missing url", ep(`{name: a, type: vllm}`), "discovery.static.endpoints[0] (a).url: required"},
		{"missing name", ep(`{url: "http://a", type: vllm}`), "discovery.static.endpoints[0].name: required"},
		{"relative url", ep(`{url: "a:8000", name: a, type: vllm}`), "(a).url: \"a:8000\" is not an absolute"},
		{"credentials in url", ep(`{url: "http://u:p@a", name: a, type: vllm}`), "(a).url: credentials in the URL"},
		{"unknown type", ep(`{url: "http://a", name: a, type: tgi}`), "(a).type: \"tgi\" is not an Olla endpoint type"},
		{"negative priority", ep(`{url: "http://a", name: a, type: vllm, priority: -1}`), "(a).priority: -1 is negative"},
		{"bad duration", ep(`{url: "http://a", name: a, type: vllm, check_interval: soon}`), "time.Duration"},
		{"negative interval", ep(`{url: "http://a", name: a, type: vllm, check_interval: -5s}`), "(a).check_interval: -5s is negative"},
		{"bad header name", ep(`{url: "http://a", name: a, type: vllm, headers: {"X Bad": v}}`), "(a).headers.X Bad: \"X Bad\" is not a valid header name"},
		{"bad env name", ep(`{url: "http://a", name: a, type: vllm, headers: {X: "${1A}"}}`), "(a).headers.X: ${1A}"},
		{"unterminated env", ep(`{url: "http://a", name: a, type: vllm, headers: {X: "${A"}}`), "(a).headers.X: unterminated ${"},
		{"bad auth type", ep(`{url: "http://a", name: a, type: vllm, auth: {type: oauth}}`), "(a).auth.type: \"oauth\""},
		{"auth without token", ep(`{url: "http://a", name: a, type: vllm, auth: {type: bearer}}`), "(a).auth: bearer auth needs token or token_file"},
		{"auth both", ep(`{url: "http://a", name: a, type: vllm, auth: {type: bearer, token: a, token_file: b}}`), "token and token_file are both set"},
		{"auth mixed", ep(`{url: "http://a", name: a, type: vllm, auth: {type: bearer, token: a, password: b}}`), "fields of another auth type"},
		{"duplicate names", "discovery:\n  static:\n    endpoints:\n      - {url: \"http://a\", name: a, type: vllm}\n      - {url: \"http://b\", name: a, type: vllm}\n", "endpoints[1] (a).name: \"a\" is also endpoint 0's name"},
		{"bad balancer", "proxy: {load_balancer: random}\n", "proxy.load_balancer: \"random\""},
		{"bad port", "server: {port: 70000}\n", "server.port: 70000"},
		{"empty alias", "model_aliases:\n  x: []\n", "model_aliases.x: no model names"},
		{"empty alias target", "model_aliases:\n  x: [a, \"\"]\n", "model_aliases.x: an empty model name"},
		{"spaced alias", "model_aliases:\n  \" x\": [a]\n", "alias \" x\": empty or with leading/trailing spaces"},
		{"too big", "#" + strings.Repeat("x", MaxInputBytes), "more than the"},
		{"many endpoints", "discovery:\n  static:\n    endpoints:\n" + strings.Repeat("      - {url: \"http://a\", name: a}\n", MaxEndpoints+1), "endpoints is more than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Convert([]byte(c.in))
			if err == nil {
				t.Fatalf("no error for %q", c.in)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

// TestAllErrorsAtOnce: a file with several problems reports each, one per line.
func TestAllErrorsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := Convert([]byte("discovery:\n  static:\n    endpoints:\n      - {name: a, type: vllm}\n      - {url: \"http://b\", name: b, type: nope}\n"))
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "(a).url") || !strings.Contains(lines[1], "(b).type") {
		t.Errorf("want one line per problem, got %q", err)
	}
}

func FuzzConvert(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("model_aliases: {a: [\"x:1\", \"y/z\"]}\ndiscovery: {static: {endpoints: [{url: \"http://h/p\", name: n, type: lemonade, health_check_url: \"//x\"}]}}"))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("discovery: {static: {endpoints: [{url: \"http://h\", name: n, headers: {A: \"${B:-c}${D}\"}, auth: {type: basic, username: \"${U}\", password: p}}]}}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Convert(in)
		if err != nil {
			return
		}
		// Whatever converts must be a config infergate decodes, with every upstream named
		// and typed (header ${VAR}s aside, which need the environment).
		var c struct {
			Upstreams []upstream.Endpoint `yaml:"upstreams"`
			Server    struct {
				IdleTimeout yaml.Node `yaml:"idle_timeout"`
			} `yaml:"server"`
			Compat struct {
				OllaHeaders bool `yaml:"olla_headers"`
			} `yaml:"compat"`
		}
		dec := yaml.NewDecoder(bytes.NewReader(r.YAML))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("output does not decode: %v\n%s", err, r.YAML)
		}
		for i := range c.Upstreams {
			c.Upstreams[i].Headers = nil
		}
		if err := upstream.Validate(c.Upstreams); err != nil {
			t.Fatalf("output rejected: %v\n%s", err, r.YAML)
		}
	})
}
