// Package ollaconfig converts an Olla config file (thushan/olla's config.yaml) into the equivalent
// infergate config, so an Olla user can switch by converting the file they have. It reads Olla's
// endpoint list (discovery.static.endpoints) and model aliases, and lists every other Olla
// setting the file holds with what became of it: converted, approximated, or without counterpart.
//
// Conversion is pure: it reads no environment variable and no file. ${VAR} references in headers
// and credentials stay in the output for infergate to expand when it loads the config.
package ollaconfig

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/http/httpguts"
)

// Bounds on what Convert accepts: an Olla config is a hand-written file of a few kilobytes.
const (
	MaxInputBytes   = 1 << 20
	MaxEndpoints    = 1024
	MaxAliases      = 4096
	MaxAliasTargets = 256
)

// Result is an Olla config converted.
type Result struct {
	// YAML is the infergate config: the upstreams (and server.idle_timeout when Olla set it),
	// headed by the Notes as comments. It loads with `infergate -config`.
	YAML []byte
	// Notes lists, one line per setting, the Olla settings that have no counterpart in
	// infergate or were approximated, each as "path: value: what became of it".
	Notes []string
	// Listen is Olla's server.host:server.port (defaults localhost:40114): infergate takes its
	// listening address from the -listen flag, not the config file.
	Listen string
}

// Olla's defaults (internal/config/config.go, internal/adapter/discovery/repository.go).
const (
	ollaDefaultPriority = 100
	ollaDefaultHost     = "localhost"
	ollaDefaultPort     = 40114
)

// typeInfo is what one Olla endpoint type (a profile in Olla's config/profiles) becomes.
type typeInfo struct {
	profile string // Olla's profile name, for notes
	to      string // infergate's type
	// health and models are the profile's default paths.
	health, models string
	// prefix is joined to the URL so that infergate's URL + /v1/... reaches the server's
	// OpenAI routes (Lemonade serves them under /api, Docker Model Runner under /engines).
	prefix string
	// note says what is approximated; empty when the mapping is exact.
	note string
}

var ollaTypes = func() map[string]typeInfo {
	openaiLike := func(profile, health, models, prefix, server string) typeInfo {
		return typeInfo{profile: profile, to: "openai", health: health, models: models, prefix: prefix,
			note: server + " speaks OpenAI's API: infergate proxies it as type openai (its own native routes and metrics are not used)"}
	}
	lms := typeInfo{profile: "lm-studio", to: "lm-studio", health: "/v1/models", models: "/api/v0/models"}
	oai := typeInfo{profile: "openai-compatible", to: "openai", health: "/v1/models", models: "/v1/models"}
	dmr := openaiLike("docker-model-runner", "/engines/v1/models", "/engines/v1/models", "/engines", "Docker Model Runner")
	auto := typeInfo{profile: "auto", to: "openai", health: "/", models: "/v1/models",
		note: "Olla detects the server's kind at run time; infergate proxies it as type openai"}
	return map[string]typeInfo{
		"vllm":                {profile: "vllm", to: "vllm", health: "/health", models: "/v1/models"},
		"ollama":              {profile: "ollama", to: "ollama", health: "/", models: "/api/tags"},
		"openai":              oai,
		"openai-compatible":   oai,
		"lm-studio":           lms,
		"lmstudio":            lms,
		"lm_studio":           lms,
		"sglang":              {profile: "sglang", to: "sglang", health: "/health", models: "/v1/models"},
		"llamacpp":            {profile: "llamacpp", to: "llamacpp", health: "/health", models: "/v1/models"},
		"lemonade":            openaiLike("lemonade", "/api/v1/health", "/api/v1/models", "/api", "Lemonade"),
		"litellm":             openaiLike("litellm", "/health", "/v1/models", "", "LiteLLM"),
		"vllm-mlx":            openaiLike("vllm-mlx", "/health", "/v1/models", "", "vLLM-MLX (not vLLM: no vllm: metrics)"),
		"lmdeploy":            openaiLike("lmdeploy", "/health", "/v1/models", "", "LMDeploy"),
		"omlx":                openaiLike("omlx", "/health", "/v1/models", "", "oMLX"),
		"docker-model-runner": dmr,
		"dmr":                 dmr,
		"auto":                auto,
		"":                    auto,
	}
}()

// infergateDefaults are the health and model paths infergate's upstream config assumes per type
// (upstream): an endpoint whose paths equal them leaves them out.
var infergateHealth = map[string]string{"vllm": "/health", "sglang": "/health", "llamacpp": "/health",
	"lm-studio": "/v1/models", "openai": "/v1/models", "ollama": "/"}

const infergateModels = "/v1/models"

// out* are the infergate config written: only what the conversion sets, in the order a reader
// of infergate's example config expects.
type outConfig struct {
	Upstreams []outEndpoint `yaml:"upstreams"`
	Server    *outServer    `yaml:"server,omitempty"`
	// Compat turns on Olla's response headers: an Olla user's tools read them.
	Compat outCompat `yaml:"compat"`
}

type outCompat struct {
	OllaHeaders bool `yaml:"olla_headers"`
}

type outServer struct {
	IdleTimeout string `yaml:"idle_timeout,omitempty"`
}

type outEndpoint struct {
	Name           string            `yaml:"name"`
	URL            string            `yaml:"url"`
	Type           string            `yaml:"type"`
	Priority       int               `yaml:"priority"`
	HealthCheckURL string            `yaml:"health_check_url,omitempty"`
	CheckInterval  string            `yaml:"check_interval,omitempty"`
	CheckTimeout   string            `yaml:"check_timeout,omitempty"`
	ModelURL       string            `yaml:"model_url,omitempty"`
	Headers        map[string]string `yaml:"headers,omitempty"`
	Models         []string          `yaml:"models,omitempty"`
	Aliases        map[string]string `yaml:"aliases,omitempty"`
}

// Convert reads an Olla config file and returns the equivalent infergate config. Every problem
// found is returned, one per line, each naming its key (and line where the YAML parser gives one).
func Convert(olla []byte) (Result, error) {
	if len(olla) > MaxInputBytes {
		return Result{}, fmt.Errorf("olla config: %d bytes is more than the %d an Olla config may have", len(olla), MaxInputBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(olla, &doc); err != nil {
		return Result{}, fmt.Errorf("olla config: %w", err)
	}
	var root *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	var cfg ollaConfig
	if root != nil {
		if root.Kind != yaml.MappingNode {
			return Result{}, fmt.Errorf("olla config: line %d: the top level must be a mapping of settings", root.Line)
		}
		if errs := checkKeys(root, typeOfConfig, ""); len(errs) > 0 {
			return Result{}, joinLines(errs)
		}
		if err := root.Decode(&cfg); err != nil {
			return Result{}, fmt.Errorf("olla config: %w", err)
		}
	}
	c := converter{cfg: &cfg}
	if root != nil {
		c.settingNotes(root, "")
	}
	c.convert()
	if len(c.errs) > 0 {
		return Result{}, joinLines(c.errs)
	}
	return c.result()
}

type converter struct {
	cfg   *ollaConfig
	out   outConfig
	notes []string
	errs  []error
}

func (c *converter) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

func (c *converter) fail(field string, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (c *converter) convert() {
	c.out.Compat.OllaHeaders = true
	if d := c.cfg.Server.IdleTimeout; d != 0 {
		if d < 0 {
			c.fail("server.idle_timeout", "%v is negative", d)
		} else {
			c.out.Server = &outServer{IdleTimeout: d.String()}
		}
	}
	switch c.cfg.Proxy.LoadBalancer {
	case "", "least-connections", "round-robin", "priority":
	default:
		c.fail("proxy.load_balancer", "%q is none of Olla's least-connections, round-robin, priority", c.cfg.Proxy.LoadBalancer)
	}

	var eps []endpointConfig
	if p := c.cfg.Discovery.Static.Endpoints; p != nil {
		eps = *p
	} else {
		// Olla keeps its built-in endpoint when the file lists none (config.DefaultConfig).
		prio := ollaDefaultPriority
		eps = []endpointConfig{{Name: "localhost", URL: "http://localhost:11434", Type: "ollama", Priority: &prio,
			HealthCheckURL: "/health", ModelURL: "/api/tags", CheckInterval: 5 * time.Second, CheckTimeout: 2 * time.Second}}
		c.note("discovery.static.endpoints: (absent): Olla's built-in endpoint (localhost, an Ollama at http://localhost:11434) is converted")
	}
	if len(eps) > MaxEndpoints {
		c.fail("discovery.static.endpoints", "%d endpoints is more than %d", len(eps), MaxEndpoints)
		return
	}
	if len(eps) == 0 {
		c.note("discovery.static.endpoints: []: no endpoints; infergate serves only its built-in models")
	}
	// Olla keys its endpoints by URL: of several with one URL, only the last is used.
	last := map[string]int{}
	for i, ep := range eps {
		if u, err := url.Parse(ep.URL); err == nil && ep.URL != "" {
			last[u.String()] = i
		}
	}
	c.out.Upstreams = make([]outEndpoint, 0, len(eps))
	kept := make([]endpointConfig, 0, len(eps))
	names := map[string]int{}
	for i, ep := range eps {
		field := fmt.Sprintf("discovery.static.endpoints[%d]", i)
		if ep.Name != "" {
			field += fmt.Sprintf(" (%s)", ep.Name)
		}
		if u, err := url.Parse(ep.URL); err == nil && ep.URL != "" && last[u.String()] != i {
			c.note("%s: %s: Olla uses only the last endpoint with this URL (endpoint %d): left out", field, ep.URL, last[u.String()])
			continue
		}
		if j, dup := names[ep.Name]; dup && ep.Name != "" {
			c.fail(field+".name", "%q is also endpoint %d's name; infergate needs unique names", ep.Name, j)
		}
		names[ep.Name] = i
		if o, ok := c.endpoint(field, ep); ok {
			c.out.Upstreams = append(c.out.Upstreams, o)
			kept = append(kept, ep)
		}
	}
	if len(c.errs) > 0 {
		return
	}
	c.priorities()
	c.aliases(kept)
}

// endpoint converts one Olla endpoint; ok is false when it has errors (recorded).
func (c *converter) endpoint(field string, ep endpointConfig) (outEndpoint, bool) {
	nerrs := len(c.errs)
	o := outEndpoint{Name: ep.Name, Priority: ollaDefaultPriority}
	if ep.Name == "" {
		c.fail(field+".name", "required (infergate names every upstream)")
	}
	ti, known := ollaTypes[ep.Type]
	if !known {
		c.fail(field+".type", "%q is not an Olla endpoint type (%s)", ep.Type, strings.Join(knownTypes(), ", "))
	}
	o.Type = ti.to
	if ti.note != "" {
		c.note("%s.type: %s: %s", field, orAuto(ep.Type), ti.note)
	}
	if ep.Priority != nil {
		if *ep.Priority < 0 {
			c.fail(field+".priority", "%d is negative", *ep.Priority)
		}
		o.Priority = *ep.Priority
	}
	if ep.CheckInterval < 0 {
		c.fail(field+".check_interval", "%v is negative", ep.CheckInterval)
	} else if ep.CheckInterval > 0 {
		o.CheckInterval = ep.CheckInterval.String()
	}
	if ep.CheckTimeout < 0 {
		c.fail(field+".check_timeout", "%v is negative", ep.CheckTimeout)
	} else if ep.CheckTimeout > 0 {
		o.CheckTimeout = ep.CheckTimeout.String()
	}

	base, err := url.Parse(ep.URL)
	switch {
	case ep.URL == "":
		c.fail(field+".url", "required")
	case err != nil:
		c.fail(field+".url", "%v", err)
	case base.Scheme != "http" && base.Scheme != "https" || base.Host == "":
		c.fail(field+".url", "%q is not an absolute http:// or https:// URL", ep.URL)
	case base.User != nil:
		c.fail(field+".url", "credentials in the URL (Olla refuses them too): move them to auth")
	case base.RawQuery != "" || base.Fragment != "":
		c.fail(field+".url", "%q has a query or fragment", ep.URL)
	}
	if len(c.errs) > nerrs {
		return o, false
	}
	c.paths(field, ep, ti, base, &o)
	c.headers(field, ep, &o)
	c.modelFilter(field, ep, &o)
	return o, len(c.errs) == nerrs
}

// paths sets the endpoint's URL, health check and model listing URLs so that infergate asks the
// same URLs Olla did.
func (c *converter) paths(field string, ep endpointConfig, ti typeInfo, base *url.URL, o *outEndpoint) {
	basePath := strings.TrimSuffix(base.Path, "/")
	ig := *base
	ig.Path, ig.RawPath = "", ""
	if basePath != "" {
		if ep.PreservePath {
			ig.Path = basePath
		} else {
			// Olla (preserve_path: false) replaces the URL's path with the request's; infergate
			// appends the request's path to the URL's, so the path goes.
			c.note("%s.url: %s: Olla sends requests to the host's root without preserve_path; the path is left out of url (health and model URLs keep it, as in Olla)", field, ep.URL)
		}
	} else if ep.PreservePath {
		c.note("%s.preserve_path: true: the URL has no path to preserve; nothing to convert", field)
	}
	if ep.PreservePath && basePath != "" {
		c.note("%s.preserve_path: true: infergate always appends the request's path to url's path", field)
	}
	ig.Path += ti.prefix
	o.URL = ig.String()

	health := ep.HealthCheckURL
	if health == "" {
		health = ti.health
	}
	models := ep.ModelURL
	if models == "" {
		models = ti.models
	}
	// Olla lists Ollama's and LM Studio's models in their native shapes; infergate reads
	// OpenAI's, which both serve at /v1/models.
	if native := ti.models; native != "/v1/models" && ti.prefix == "" && models == native {
		c.note("%s.model_url: %s: infergate lists models in OpenAI's shape: /v1/models instead", field, native)
		models = "/v1/models"
	}
	hu, err := ollaJoin(base, health)
	if err != nil {
		c.fail(field+".health_check_url", "%v", err)
		return
	}
	mu, err := ollaJoin(base, models)
	if err != nil {
		c.fail(field+".model_url", "%v", err)
		return
	}
	if h := relativeTo(&ig, hu); h != infergateHealth[o.Type] {
		o.HealthCheckURL = h
	}
	if m := relativeTo(&ig, mu); m != infergateModels {
		o.ModelURL = m
	}
}

// ollaJoin is Olla's util.ResolveURLPath: an absolute URL as it is, a path joined to the base
// URL's path.
func ollaJoin(base *url.URL, ref string) (*url.URL, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	if u.IsAbs() {
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("%q is neither a path nor an http(s) URL", ref)
		}
		return u, nil
	}
	if u.Host != "" {
		return nil, fmt.Errorf("%q is neither a path nor an http(s) URL", ref)
	}
	out := *base
	out.Path = path.Join("/", base.Path, u.Path)
	out.RawPath = ""
	out.RawQuery = u.RawQuery
	return &out, nil
}

// relativeTo writes target as infergate's path relative to base (which infergate appends to
// base's path) when it lies under base, and as an absolute URL otherwise.
func relativeTo(base, target *url.URL) string {
	if target.Scheme == base.Scheme && target.Host == base.Host && target.User == nil {
		if rest, ok := strings.CutPrefix(target.Path, base.Path); ok && strings.HasPrefix(rest, "/") {
			if target.RawQuery != "" {
				rest += "?" + target.RawQuery
			}
			return rest
		}
	}
	return target.String()
}

// headers converts headers and auth into infergate's headers, keeping ${VAR} references.
func (c *converter) headers(field string, ep endpointConfig, o *outEndpoint) {
	hs := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(ep.Headers)) {
		f := field + ".headers." + name
		if !httpguts.ValidHeaderFieldName(name) {
			c.fail(f, "%q is not a valid header name", name)
			continue
		}
		if v, ok := c.envValue(f, ep.Headers[name]); ok {
			hs[name] = v
		}
	}
	if ep.Auth != nil {
		if name, value, ok := c.auth(field+".auth", ep.Name, ep.Auth); ok {
			for k := range hs {
				if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(name) {
					c.note("%s.headers.%s: replaced by auth, which Olla also lets win", field, k)
					delete(hs, k)
				}
			}
			hs[name] = value
		}
	}
	if len(hs) > 0 {
		o.Headers = hs
	}
}

// envValue converts a value holding Olla's ${VAR} and ${VAR:-default} references into one
// holding infergate's ${VAR}: infergate has no defaults, so a default is dropped (noted).
func (c *converter) envValue(field, s string) (string, bool) {
	var b strings.Builder
	literal := strings.Builder{}
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			literal.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		literal.WriteString(rest[:i])
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			c.fail(field, "unterminated ${ (infergate reads ${NAME} as an environment variable)")
			return "", false
		}
		expr := rest[i+2 : i+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validEnvName(name) {
			c.fail(field, "${%s}: %q is not an environment variable name", expr, name)
			return "", false
		}
		if hasDef {
			c.note("%s: ${%s}: infergate has no ${VAR:-default}: ${%s} must be set (the default %q is dropped)", field, expr, name, def)
		}
		b.WriteString("${" + name + "}")
		rest = rest[i+end+1:]
	}
	if !httpguts.ValidHeaderFieldValue(literal.String()) {
		c.fail(field, "not a valid header value")
		return "", false
	}
	return b.String(), true
}

// auth converts Olla's auth block into the header it sends, checked as Olla checks it.
func (c *converter) auth(field, epName string, a *authConfig) (name, value string, ok bool) {
	set := func(s string) bool { return s != "" }
	pair := func(what, v, file string) bool {
		switch {
		case set(v) && set(file):
			c.fail(field, "%s and %s_file are both set; use one", what, what)
			return false
		case !set(v) && !set(file):
			c.fail(field, "%s auth needs %s or %s_file", a.Type, what, what)
			return false
		}
		return true
	}
	others := map[string][]string{
		"bearer":  {a.Key, a.KeyFile, a.Username, a.UsernameFile, a.Password, a.PasswordFile, a.Header},
		"api_key": {a.Token, a.TokenFile, a.Username, a.UsernameFile, a.Password, a.PasswordFile},
		"basic":   {a.Token, a.TokenFile, a.Key, a.KeyFile, a.Header},
	}
	o, known := others[a.Type]
	if !known {
		c.fail(field+".type", "%q is not one of bearer, api_key, basic", a.Type)
		return "", "", false
	}
	if slices.ContainsFunc(o, set) {
		c.fail(field, "fields of another auth type are set for type %s", a.Type)
		return "", "", false
	}
	// secret is a credential as infergate's header value: the inline value with its ${VAR}s,
	// or, for a *_file credential (infergate reads no secret files), a variable to set from it.
	secret := func(what, v, file string) (string, bool) {
		if file != "" {
			env := envName(epName, what)
			c.note("%s.%s_file: %s: infergate reads no secret files: set %s to the file's contents", field, what, file, env)
			return "${" + env + "}", true
		}
		return c.envValue(field+"."+what, v)
	}
	switch a.Type {
	case "bearer":
		if !pair("token", a.Token, a.TokenFile) {
			return "", "", false
		}
		t, ok := secret("token", a.Token, a.TokenFile)
		return "Authorization", "Bearer " + t, ok
	case "api_key":
		if !pair("key", a.Key, a.KeyFile) {
			return "", "", false
		}
		name = a.Header
		if name == "" {
			name = "X-Api-Key" // Olla's default
		}
		if !httpguts.ValidHeaderFieldName(name) {
			c.fail(field+".header", "%q is not a valid header name", name)
			return "", "", false
		}
		k, ok := secret("key", a.Key, a.KeyFile)
		return name, k, ok
	default: // basic
		if !pair("username", a.Username, a.UsernameFile) || !pair("password", a.Password, a.PasswordFile) {
			return "", "", false
		}
		if a.UsernameFile == "" && a.PasswordFile == "" && !strings.Contains(a.Username+a.Password, "${") {
			return "Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(a.Username+":"+a.Password)), true
		}
		// infergate cannot base64-encode at load time what only the environment holds.
		env := envName(epName, "basic_auth")
		c.note("%s: basic: the credentials come from the environment or files, which infergate cannot base64-encode: set %s to base64(username:password)", field, env)
		return "Authorization", "Basic ${" + env + "}", true
	}
}

// envName makes the name of a variable the user sets for an endpoint's credential.
func envName(endpoint, what string) string {
	var b strings.Builder
	b.WriteString("OLLA_")
	for _, r := range strings.ToUpper(endpoint + "_" + what) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9' {
			continue
		}
		return false
	}
	return true
}

// modelFilter converts a model_filter that lists exact names into infergate's allow-list;
// globs and excludes have no counterpart.
func (c *converter) modelFilter(field string, ep endpointConfig, o *outEndpoint) {
	f := ep.ModelFilter
	if f == nil {
		return
	}
	exact := len(f.Include) > 0 && len(f.Exclude) == 0 &&
		!slices.ContainsFunc(f.Include, func(s string) bool { return s == "" || strings.Contains(s, "*") })
	if exact {
		o.Models = slices.Clone(f.Include)
		return
	}
	c.note("%s.model_filter: include %v, exclude %v: infergate's models allow-list takes exact names only: not converted, every model the endpoint lists is routed", field, f.Include, f.Exclude)
}

// priorities flattens the tiers when Olla's balancer ignored them: only its priority balancer
// reads priority, while infergate always serves from the highest healthy tier.
func (c *converter) priorities() {
	lb := c.cfg.Proxy.LoadBalancer
	if lb == "" {
		lb = "least-connections"
	}
	if lb == "priority" || len(c.out.Upstreams) < 2 {
		return
	}
	differ := slices.ContainsFunc(c.out.Upstreams, func(o outEndpoint) bool { return o.Priority != c.out.Upstreams[0].Priority })
	if !differ {
		return
	}
	for i := range c.out.Upstreams {
		o := &c.out.Upstreams[i]
		if o.Priority != ollaDefaultPriority {
			c.note("discovery.static.endpoints[%d] (%s).priority: %d: Olla's %s balancer ignores priority; infergate would use it as a failover tier, so every endpoint gets %d (one tier). Restore the value for failover tiers",
				i, o.Name, o.Priority, lb, ollaDefaultPriority)
			o.Priority = ollaDefaultPriority
		}
	}
}

// aliases copies Olla's model aliases onto every endpoint. Olla maps an alias to several names
// and rewrites the request to whichever one the chosen endpoint serves; infergate maps an alias
// to one name per endpoint, so a name is chosen per endpoint by its naming convention.
func (c *converter) aliases(eps []endpointConfig) {
	al := c.cfg.ModelAliases
	if len(al) == 0 {
		return
	}
	if len(al) > MaxAliases {
		c.fail("model_aliases", "%d aliases is more than %d", len(al), MaxAliases)
		return
	}
	names := slices.Sorted(maps.Keys(al))
	for _, alias := range names {
		targets := al[alias]
		field := "model_aliases." + alias
		switch {
		case alias == "" || strings.TrimSpace(alias) != alias:
			c.fail("model_aliases", "alias %q: empty or with leading/trailing spaces", alias)
			continue
		case len(targets) == 0:
			c.fail(field, "no model names")
			continue
		case len(targets) > MaxAliasTargets:
			c.fail(field, "%d model names is more than %d", len(targets), MaxAliasTargets)
			continue
		case slices.Contains(targets, ""):
			c.fail(field, "an empty model name")
			continue
		}
		var chosen []string
		for i := range c.out.Upstreams {
			o := &c.out.Upstreams[i]
			t := pickTarget(targets, eps[i].Type)
			if t == alias {
				chosen = append(chosen, o.Name+" -> "+t+" (its own name)")
				continue // the endpoint serves the alias's name itself
			}
			if len(o.Models) > 0 && !slices.Contains(o.Models, t) {
				chosen = append(chosen, o.Name+": none (not in its model_filter)")
				continue
			}
			if o.Aliases == nil {
				o.Aliases = map[string]string{}
			}
			o.Aliases[alias] = t
			chosen = append(chosen, o.Name+" -> "+t)
		}
		if len(targets) > 1 && len(c.out.Upstreams) > 0 {
			c.note("%s: %v: infergate maps an alias to one name per endpoint, chosen by each endpoint's naming convention: %s. An endpoint that does not serve its name does not serve the alias: check these",
				field, targets, strings.Join(chosen, ", "))
		}
	}
	if len(c.errs) == 0 {
		c.note("model_aliases: in Olla an alias wins over a model of the same name; in infergate an endpoint's own model of that name wins")
	}
}

// pickTarget chooses, of an alias's names, the one an endpoint of Olla type typ most likely
// serves: Ollama names carry a :tag, llama.cpp serves GGUF file names, vLLM-style servers
// Hugging Face ids (org/name); other servers plain names. The first name when none fits.
func pickTarget(targets []string, typ string) string {
	if len(targets) == 1 {
		return targets[0]
	}
	var fits func(string) bool
	switch typ {
	case "ollama":
		fits = func(s string) bool { return strings.Contains(s, ":") }
	case "llamacpp":
		fits = func(s string) bool { return strings.HasSuffix(strings.ToLower(s), ".gguf") }
	case "vllm", "sglang", "lmdeploy", "vllm-mlx":
		fits = func(s string) bool { return strings.Contains(s, "/") }
	default:
		fits = func(s string) bool {
			return !strings.ContainsAny(s, ":/") && !strings.HasSuffix(strings.ToLower(s), ".gguf")
		}
	}
	if i := slices.IndexFunc(targets, fits); i >= 0 {
		return targets[i]
	}
	return targets[0]
}

func knownTypes() []string {
	var ts []string
	for t := range ollaTypes {
		if t != "" {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return ts
}

func orAuto(t string) string {
	if t == "" {
		return "(empty: auto)"
	}
	return t
}

func (c *converter) result() (Result, error) {
	host, port := c.cfg.Server.Host, c.cfg.Server.Port
	if host == "" {
		host = ollaDefaultHost
	}
	if port == 0 {
		port = ollaDefaultPort
	}
	if port < 0 || port > 65535 {
		return Result{}, fmt.Errorf("server.port: %d is not a TCP port", port)
	}
	listen := fmt.Sprintf("%s:%d", host, port)
	if strings.Contains(host, ":") {
		listen = fmt.Sprintf("[%s]:%d", host, port)
	}

	var buf bytes.Buffer
	buf.WriteString("# infergate config converted from an Olla config (infergate's runtime/ollaconfig).\n")
	fmt.Fprintf(&buf, "# Olla listened on %s: start infergate with -listen %s\n", listen, listen)
	if len(c.notes) > 0 {
		buf.WriteString("# Olla settings without a counterpart, or approximated:\n")
		for _, n := range c.notes {
			buf.WriteString("#   " + strings.ReplaceAll(n, "\n", " ") + "\n")
		}
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&c.out); err != nil {
		return Result{}, fmt.Errorf("writing the infergate config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return Result{}, fmt.Errorf("writing the infergate config: %w", err)
	}
	return Result{YAML: buf.Bytes(), Notes: c.notes, Listen: listen}, nil
}

func joinLines(errs []error) error {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = "olla config: " + e.Error()
	}
	return errors.New(strings.Join(lines, "\n"))
}
