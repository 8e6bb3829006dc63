package guard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/lib/logthrottle"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Auth checks API keys on every transport: HTTP (OpenAI's API, KServe REST, Connect, gRPC-Web)
// through HTTP, and native gRPC through the transport's tap, which runs when a call's headers
// arrive, before any of its messages is read or decompressed. A request with a valid key carries
// its Principal in its context; without one it is refused with the protocol's 401 /
// UNAUTHENTICATED. Health checks, metrics and server reflection need no key; loading and
// unloading models needs a key with the control permission (or admin); the backend registry,
// the admin endpoint and the operator console need an admin key.
type Auth struct {
	keys KeyStore
	log  *logthrottle.Throttle // a key store that fails, fails every request: one line per interval
	ew   *connect.ErrorWriter
}

// NewAuth returns an Auth checking keys against keys.
func NewAuth(keys KeyStore, log *slog.Logger) *Auth {
	if log == nil {
		log = slog.Default()
	}
	return &Auth{keys: keys, log: logthrottle.New(log, 0), ew: connect.NewErrorWriter(connect.WithRequireConnectProtocolHeader())}
}

// open reports whether a path (an HTTP path or a gRPC full method) needs no key.
func open(path string) bool {
	switch path {
	case "/metrics", "/health", "/v2/health/live", "/v2/health/ready", "/internal/health", "/version":
		return true
	}
	return strings.HasPrefix(path, "/grpc.health.v1.Health/") || strings.HasPrefix(path, "/grpc.reflection.")
}

// adminOnly reports whether a path needs an admin key.
func adminOnly(path string) bool {
	return strings.HasPrefix(path, "/infergate.registry.v1.RegistryService/") || strings.HasPrefix(path, "/admin/") ||
		strings.HasPrefix(path, "/internal/") || // Olla's status pages: every endpoint's URL and load
		consolePath(path)
}

// consolePath reports whether path is the operator console's (surface/console): a page a browser
// opens, which cannot send a bearer token on navigation, so it may send the key as the password
// of HTTP Basic authentication instead (the user name is ignored), and a refusal asks for it so.
func consolePath(path string) bool {
	return path == "/console" || strings.HasPrefix(path, "/console/")
}

// controlOnly reports whether a path changes the server for every caller: loading and unloading
// models (KServe's repository extension, over gRPC, Connect and REST), and Triton's trace and log
// settings.
func controlOnly(path string) bool {
	switch path {
	case "/inference.GRPCInferenceService/RepositoryModelLoad", "/inference.GRPCInferenceService/RepositoryModelUnload",
		"/inference.GRPCInferenceService/TraceSetting", "/inference.GRPCInferenceService/LogSettings",
		"/v2/logging", "/v2/trace/setting":
		return true
	}
	if rest, ok := strings.CutPrefix(path, "/v2/repository/models/"); ok {
		return strings.HasSuffix(rest, "/load") || strings.HasSuffix(rest, "/unload")
	}
	if rest, ok := strings.CutPrefix(path, "/v2/models/"); ok {
		return strings.HasSuffix(rest, "/trace/setting")
	}
	return false
}

// bearer returns the token of an "Authorization: Bearer <token>" value.
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// check authenticates one request for path with the given Authorization value.
func (a *Auth) check(ctx context.Context, path, authorization string) (*Principal, *connect.Error) {
	secret, ok := bearer(authorization)
	if !ok {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("missing API key: send it as 'Authorization: Bearer <key>'"))
	}
	p, err := a.keys.Lookup(ctx, secret)
	switch {
	case errors.Is(err, ErrUnknownKey):
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("invalid API key"))
	case err != nil:
		a.log.Warn("key-check-failed", "API key check failed; requests refused", "err", err)
		e := connect.NewError(connect.CodeUnavailable, errors.New("the API key could not be checked right now; retry later"))
		e.Meta().Set("Retry-After", "1")
		return nil, e
	case adminOnly(path) && !p.Admin:
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("this API key may not use "+path+": it needs an admin key"))
	case controlOnly(path) && !p.MayControl():
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("this API key may not use "+path+": loading and unloading models needs a key with the control permission"))
	}
	return p, nil
}

// HTTP wraps the gateway's HTTP handler.
func (a *Auth) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		authz := r.Header.Get("Authorization")
		if k := r.Header.Get("X-Api-Key"); authz == "" && k != "" {
			authz = "Bearer " + k // Anthropic's clients send their key so
		}
		if _, pass, ok := r.BasicAuth(); ok && consolePath(r.URL.Path) {
			authz = "Bearer " + pass
		}
		p, cerr := a.check(r.Context(), r.URL.Path, authz)
		if cerr != nil {
			a.refuseHTTP(w, r, cerr)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
	})
}

// refuseHTTP answers in the request's protocol: Connect, gRPC or gRPC-Web errors for those
// clients, OpenAI's error object under /v1, KServe REST's {"error": ...} elsewhere.
func (a *Auth) refuseHTTP(w http.ResponseWriter, r *http.Request, cerr *connect.Error) {
	if cerr.Code() == connect.CodeUnauthenticated {
		if consolePath(r.URL.Path) {
			w.Header().Set("WWW-Authenticate", `Basic realm="infergate console", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="infergate"`)
		}
	}
	for k, vv := range cerr.Meta() {
		w.Header()[k] = vv
	}
	if a.ew.IsSupported(r) {
		_ = a.ew.Write(w, r, cerr)
		return
	}
	status := httpapi.RESTStatus(cerr.Code())
	var body any
	switch path := r.URL.Path; {
	case strings.HasPrefix(path, "/v1/messages") || strings.HasPrefix(path, "/olla/anthropic/"):
		typ := "authentication_error"
		switch cerr.Code() {
		case connect.CodePermissionDenied:
			typ = "permission_error"
		case connect.CodeUnavailable:
			typ = "overloaded_error"
		}
		body = anthropicError(cerr.Message(), typ)
	case strings.HasPrefix(path, "/v1/") || path == "/v1" || strings.HasPrefix(path, "/olla/"):
		code := "invalid_api_key"
		if cerr.Code() == connect.CodePermissionDenied {
			code = "permission_denied"
		}
		body = openAIError(cerr.Message(), code)
	default:
		body = map[string]string{"error": cerr.Message()}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// anthropicError is the Anthropic Messages API's error object.
func anthropicError(msg, typ string) any {
	type errObj struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	return struct {
		Type  string `json:"type"`
		Error errObj `json:"error"`
	}{"error", errObj{typ, msg}}
}

func openAIError(msg, code string) any {
	type errObj struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	}
	return struct {
		Error errObj `json:"error"`
	}{errObj{Message: msg, Type: "invalid_request_error", Code: code}}
}

// GRPCOption authenticates native gRPC calls in the transport's tap, which runs when a call's
// headers arrive: a refused call ends there, before grpc-go reads (or decompresses) any of its
// messages, so a caller without a key cannot make the server buffer or inflate a single byte.
// Only one tap may be set on a server.
func (a *Auth) GRPCOption() grpc.ServerOption { return grpc.InTapHandle(a.tap) }

// tap runs on the connection's reader goroutine: a static key costs a map lookup, a Redis key a
// cached lookup (bounded by its timeout on a miss, which holds up only the connection that sent
// the unknown key).
func (a *Auth) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if open(info.FullMethodName) {
		return ctx, nil
	}
	var authorization string
	if v := info.Header.Get("authorization"); len(v) > 0 {
		authorization = v[0]
	}
	p, cerr := a.check(ctx, info.FullMethodName, authorization)
	if cerr != nil {
		return nil, status.Error(codes.Code(cerr.Code()), cerr.Message())
	}
	return WithPrincipal(ctx, p), nil
}
