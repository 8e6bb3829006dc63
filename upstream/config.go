// Package upstream is what every pool of upstream servers shares, whatever protocol it speaks
// to them (surface/openai for OpenAI-compatible HTTP servers, upstream/kserveproxy for KServe v2
// gRPC ones): the endpoint config (the YAML `upstreams` entries) and its resolution, the Set of a
// pool's endpoints over their lifetime (configured and added, each checked by its health loop
// with backoff, its health mirrored into a gauge), each endpoint's run-time State (in rotation or not, requests outstanding,
// the health loop's early-check requests), the route table (public model name -> endpoints,
// highest priority first), the Picker that chooses an endpoint for a request (LeastOutstanding:
// the highest healthy priority tier, the fewest outstanding requests inside it) and Failover, the
// loop that tries one endpoint after another with the circuit breaker's consent.
//
// A protocol keeps its own wire code: how it checks health, discovers models and sends a request,
// which of its errors may be retried on another endpoint, and the errors it answers with.
package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Endpoint configures one upstream server, as one entry of the YAML `upstreams` list. Field names
// follow Olla's static endpoints so configs translate one to one.
type Endpoint struct {
	// Name identifies the endpoint in headers, metrics and logs; unique.
	Name string `yaml:"name"`
	// URL is the server's base URL, without /v1: requests go to URL + the client's path.
	URL string `yaml:"url"`
	// Type is vllm, sglang, llamacpp, lm-studio, openai or ollama (all speak OpenAI's /v1 API;
	// the type picks the health check's default and the provider-scoped routes, /olla/{type}/,
	// that reach the endpoint), or kserve: a KServe v2 gRPC server such as Triton, served through
	// the KServe surface by upstream/kserveproxy (url http:// is cleartext gRPC, https:// TLS).
	Type string `yaml:"type"`
	// Priority: higher is preferred; a lower tier is used only when no higher one is healthy.
	Priority int `yaml:"priority"`
	// HealthCheckURL is a path joined to URL or an absolute URL; default by type (vllm, sglang,
	// llamacpp /health; openai, lm-studio /v1/models; ollama /; kserve: none, health is gRPC
	// ServerReady).
	HealthCheckURL string `yaml:"health_check_url"`
	// CheckInterval between health checks (default 5 s); failures back off up to 8x, at most 60 s.
	CheckInterval time.Duration `yaml:"check_interval"`
	// CheckTimeout bounds one health check or model listing (default 2 s).
	CheckTimeout time.Duration `yaml:"check_timeout"`
	// ModelURL lists the served models in OpenAI's shape; default /v1/models. Not used by kserve
	// endpoints, whose models come from RepositoryIndex.
	ModelURL string `yaml:"model_url"`
	// Headers are added to every upstream request (replacing the client's); values expand ${ENV}.
	// They are the only credentials an upstream gets unless ForwardClientAuth is set.
	Headers map[string]string `yaml:"headers"`
	// ForwardClientAuth passes the client's own credential headers (Authorization, Cookie,
	// X-Api-Key, X-Auth-Token, ...: see IsCredentialHeader) to this endpoint as the client sent them.
	// Off by default: a client's credentials are for the gateway, and an upstream's come from its
	// Headers, as Olla and LiteLLM do. A credential is never translated from one provider's header
	// into another's (an Anthropic client's x-api-key is not an OpenAI bearer token). Not for
	// kserve endpoints, which get only their configured headers as gRPC metadata.
	ForwardClientAuth bool `yaml:"forward_client_auth"`
	// Models, when set, is an allow-list: only these discovered models are routed to the endpoint.
	Models []string `yaml:"models"`
	// SkipDiscovery serves exactly Models, without listing the upstream's models (for servers
	// without a model listing, and for backends that registered their models).
	SkipDiscovery bool `yaml:"skip_discovery"`
	// Kind says what the endpoint's models do: chat, completions or embeddings; empty means any.
	// The KServe bridge gives every model a text_input KServe model unless its kind is embeddings.
	Kind string `yaml:"kind"`
	// Aliases maps a public model name to the name this endpoint serves it under; the request's
	// model value is replaced in place, the rest of the body is forwarded byte for byte.
	Aliases map[string]string `yaml:"aliases"`
}

// IsCredentialHeader reports whether a canonical header name is one that carries a client's
// credentials: Authorization, Cookie, X-Api-Key, X-Auth-Token or Proxy-Authorization (Olla's
// list), and the API key headers of Azure OpenAI (Api-Key) and Google's APIs (X-Goog-Api-Key),
// which clients of those providers send. They never reach an upstream unless its
// ForwardClientAuth is set (Proxy-Authorization not even then: it is hop-by-hop).
func IsCredentialHeader(k string) bool {
	switch k {
	case "Authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "Proxy-Authorization", "Api-Key", "X-Goog-Api-Key":
		return true
	}
	return false
}

// Endpoint types.
const (
	TypeVLLM     = "vllm"
	TypeSGLang   = "sglang"
	TypeLlamaCpp = "llamacpp"
	TypeLMStudio = "lm-studio"
	TypeOpenAI   = "openai"
	TypeOllama   = "ollama"
	TypeKServe   = "kserve"
)

// Types lists the endpoint types, in the order errors name them.
var Types = []string{TypeVLLM, TypeSGLang, TypeLlamaCpp, TypeLMStudio, TypeOpenAI, TypeOllama, TypeKServe}

// Endpoint kinds.
const (
	KindChat        = "chat"
	KindCompletions = "completions"
	KindEmbeddings  = "embeddings"
)

// Resolved is an endpoint as pools use it: check_interval and check_timeout defaulted, header
// values with ${ENV} expanded, and for the HTTP types health_check_url and model_url defaulted and
// made absolute. A kserve endpoint keeps health_check_url empty unless one is configured (its pool
// then checks health over gRPC), and an absolute URL when one is; its model_url stays empty.
type Resolved struct {
	Endpoint
	// BaseURL is URL parsed, without a trailing slash.
	BaseURL *url.URL
	// HealthURL and ModelsURL are HealthCheckURL and ModelURL parsed; nil when empty.
	HealthURL, ModelsURL *url.URL
	// HeaderList is Headers as name/value pairs, for the paths that set them on every request.
	HeaderList [][2]string
}

// FieldError names the endpoint and field a config problem is in.
type FieldError struct {
	Endpoint string // the endpoint's name, or "#i" (its index) when it has none
	Field    string
	Err      error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("endpoint %q: %s: %v", e.Endpoint, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks a list of endpoints (names unique, URLs, types, durations, headers including
// ${ENV} references) and returns every problem found, each a *FieldError.
func Validate(eps []Endpoint) error {
	_, err := ResolveAll(eps)
	return err
}

// Resolve validates one endpoint and returns it resolved. Problems are *FieldError values, joined.
func Resolve(ep Endpoint) (Resolved, error) {
	r, errs := resolve(ep.Name, ep)
	if err := errors.Join(errs...); err != nil {
		return Resolved{}, err
	}
	return r, nil
}

// ResolveAll is Validate returning the endpoints resolved, in order; nil when any has a problem.
// An endpoint without a name is named "#i" (its index) in its errors.
func ResolveAll(eps []Endpoint) ([]Resolved, error) {
	var errs []error
	seen := make(map[string]bool, len(eps))
	out := make([]Resolved, 0, len(eps))
	for i, ep := range eps {
		id := ep.Name
		if id == "" {
			id = fmt.Sprintf("#%d", i)
		} else if seen[id] {
			errs = append(errs, &FieldError{Endpoint: id, Field: "name", Err: errors.New("duplicate endpoint name")})
		}
		seen[id] = true
		r, epErrs := resolve(id, ep)
		errs = append(errs, epErrs...)
		out = append(out, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func resolve(id string, ep Endpoint) (Resolved, []error) {
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, &FieldError{Endpoint: id, Field: field, Err: fmt.Errorf(format, args...)})
	}
	r := Resolved{Endpoint: ep}
	if ep.Name == "" {
		bad("name", "required")
	}
	switch {
	case slices.Contains(Types, ep.Type):
	case ep.Type == "":
		bad("type", "required (%s)", strings.Join(Types, ", "))
	default:
		bad("type", "%q is not one of %s", ep.Type, strings.Join(Types, ", "))
	}
	switch ep.Kind {
	case "", KindChat, KindCompletions, KindEmbeddings:
	default:
		bad("kind", "%q is not one of chat, completions, embeddings", ep.Kind)
	}
	if ep.SkipDiscovery && len(ep.Models) == 0 {
		bad("models", "required with skip_discovery: the endpoint serves exactly these models")
	}
	if ep.Priority < 0 {
		bad("priority", "must be >= 0, got %d", ep.Priority)
	}
	base, err := url.Parse(ep.URL)
	switch {
	case ep.URL == "":
		bad("url", "required")
	case err != nil:
		bad("url", "%v", err)
	case base.Scheme != "http" && base.Scheme != "https" || base.Host == "":
		bad("url", "%q must be an absolute http:// or https:// URL", ep.URL)
	case base.User != nil:
		bad("url", "credentials in the URL are not allowed; use headers")
	case base.RawQuery != "" || base.Fragment != "":
		bad("url", "%q must not have a query or fragment", ep.URL)
	default:
		base.Path = strings.TrimSuffix(base.Path, "/")
		base.RawPath = ""
		r.BaseURL = base
	}
	// A kserve endpoint is checked and listed over gRPC (ServerReady, RepositoryIndex): it gets
	// no HTTP defaults, and model_url means nothing to it.
	if r.HealthCheckURL == "" {
		switch ep.Type {
		case TypeOpenAI, TypeLMStudio:
			r.HealthCheckURL = "/v1/models"
		case TypeOllama:
			r.HealthCheckURL = "/"
		case TypeKServe:
		default:
			r.HealthCheckURL = "/health"
		}
	}
	if r.ModelURL == "" && ep.Type != TypeKServe {
		r.ModelURL = "/v1/models"
	}
	if r.BaseURL != nil {
		if r.HealthCheckURL != "" {
			if r.HealthURL, err = join(r.BaseURL, r.HealthCheckURL); err != nil {
				bad("health_check_url", "%v", err)
			} else {
				r.HealthCheckURL = r.HealthURL.String()
			}
		}
		if r.ModelURL != "" {
			if r.ModelsURL, err = join(r.BaseURL, r.ModelURL); err != nil {
				bad("model_url", "%v", err)
			} else {
				r.ModelURL = r.ModelsURL.String()
			}
		}
	}
	if r.CheckInterval == 0 {
		r.CheckInterval = 5 * time.Second
	}
	if r.CheckTimeout == 0 {
		r.CheckTimeout = 2 * time.Second
	}
	if r.CheckInterval < 0 {
		bad("check_interval", "must be positive, got %v", ep.CheckInterval)
	}
	if r.CheckTimeout < 0 {
		bad("check_timeout", "must be positive, got %v", ep.CheckTimeout)
	}
	if ep.ForwardClientAuth && ep.Type == TypeKServe {
		bad("forward_client_auth", "applies to endpoints that speak OpenAI's HTTP API, not kserve")
	}
	for name, value := range ep.Headers {
		if !httpguts.ValidHeaderFieldName(name) {
			bad("headers", "%q is not a valid header name", name)
			continue
		}
		v, err := expandEnv(value)
		if err != nil {
			bad("headers."+name, "%v", err)
			continue
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			bad("headers."+name, "value is not a valid header value (after ${ENV} expansion)")
			continue
		}
		r.HeaderList = append(r.HeaderList, [2]string{name, v})
	}
	r.Headers = make(map[string]string, len(r.HeaderList))
	for _, kv := range r.HeaderList {
		r.Headers[kv[0]] = kv[1]
	}
	allowed := make(map[string]bool, len(ep.Models))
	for _, m := range ep.Models {
		if m == "" {
			bad("models", "empty model name")
		}
		allowed[m] = true
	}
	for alias, target := range ep.Aliases {
		switch {
		case alias == "" || target == "":
			bad("aliases", "alias %q -> %q: both names are required", alias, target)
		case len(allowed) > 0 && !allowed[target]:
			bad("aliases", "alias %q -> %q: target is not in the models allow-list", alias, target)
		}
	}
	return r, errs
}

// join resolves ref (a path, or an absolute http(s) URL) against base, keeping base's path prefix.
func join(base *url.URL, ref string) (*url.URL, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, err
	}
	if u.IsAbs() {
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("%q must be a path or an http(s) URL", ref)
		}
		return u, nil
	}
	if u.Host != "" || !strings.HasPrefix(u.Path, "/") {
		return nil, fmt.Errorf("%q must start with / or be an absolute URL", ref)
	}
	out := *base
	out.Path = base.Path + u.Path
	out.RawQuery = u.RawQuery
	return &out, nil
}

// expandEnv replaces ${NAME} with the environment variable's value. An unset variable is an error,
// so a missing secret fails at startup rather than as 401s later. A lone $ is kept as is.
func expandEnv(s string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in %q", s)
		}
		name := s[i+2 : i+end]
		if !validEnvName(name) {
			return "", fmt.Errorf("${%s}: not a valid environment variable name", name)
		}
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		b.WriteString(v)
		s = s[i+end+1:]
	}
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}
