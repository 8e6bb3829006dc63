package guard

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Auth checks API keys on every transport: HTTP (OpenAI's API, KServe REST, Connect, gRPC-Web)
// through HTTP, and native gRPC through its interceptors. A request with a valid key carries its
// Principal in its context; without one it is refused with the protocol's 401 / UNAUTHENTICATED.
// Health checks, metrics and server reflection need no key; the backend registry and the admin
// endpoint need an admin key.
type Auth struct {
	keys KeyStore
	log  *slog.Logger
	ew   *connect.ErrorWriter
}

// NewAuth returns an Auth checking keys against keys.
func NewAuth(keys KeyStore, log *slog.Logger) *Auth {
	if log == nil {
		log = slog.Default()
	}
	return &Auth{keys: keys, log: log, ew: connect.NewErrorWriter(connect.WithRequireConnectProtocolHeader())}
}

// open reports whether a path (an HTTP path or a gRPC full method) needs no key.
func open(path string) bool {
	switch path {
	case "/metrics", "/health", "/v2/health/live", "/v2/health/ready":
		return true
	}
	return strings.HasPrefix(path, "/grpc.health.v1.Health/") || strings.HasPrefix(path, "/grpc.reflection.")
}

// adminOnly reports whether a path needs an admin key.
func adminOnly(path string) bool {
	return strings.HasPrefix(path, "/infergate.registry.v1.RegistryService/") || strings.HasPrefix(path, "/admin/")
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
		a.log.Warn("API key check failed", "err", err)
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the API key could not be checked right now; retry later"))
	case adminOnly(path) && !p.Admin:
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("this API key may not use "+path))
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
		p, cerr := a.check(r.Context(), r.URL.Path, r.Header.Get("Authorization"))
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
		w.Header().Set("WWW-Authenticate", `Bearer realm="infergate"`)
	}
	if a.ew.IsSupported(r) {
		_ = a.ew.Write(w, r, cerr)
		return
	}
	status := HTTPStatus(cerr.Code())
	var body any
	if strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/v1" {
		code := "invalid_api_key"
		if cerr.Code() == connect.CodePermissionDenied {
			code = "permission_denied"
		}
		body = openAIError(cerr.Message(), code)
	} else {
		body = map[string]string{"error": cerr.Message()}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
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

// HTTPStatus is the HTTP status the guard answers for a code.
func HTTPStatus(c connect.Code) int {
	switch c {
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	case connect.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

// UnaryInterceptor authenticates native gRPC unary calls.
func (a *Auth) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := a.grpcContext(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamInterceptor authenticates native gRPC streams.
func (a *Auth) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := a.grpcContext(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return h(srv, &withContext{ss, ctx})
	}
}

func (a *Auth) grpcContext(ctx context.Context, method string) (context.Context, error) {
	if open(method) {
		return ctx, nil
	}
	var authorization string
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		authorization = v[0]
	}
	p, cerr := a.check(ctx, method, authorization)
	if cerr != nil {
		return nil, status.Error(codes.Code(cerr.Code()), cerr.Message())
	}
	return WithPrincipal(ctx, p), nil
}

type withContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *withContext) Context() context.Context { return s.ctx }
