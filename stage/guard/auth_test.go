package guard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/gen/infergate/registry/v1/registryv1connect"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/registry"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	userKey  = "sk-user-0123456789"
	adminKey = "sk-admin-0123456789"
)

// startAuthed runs a gateway with API keys required, the OpenAI proxy in front of a fake vLLM
// and the registry's path served by a stub.
func startAuthed(t *testing.T) *gatewaytest.Server {
	t.Helper()
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{
		{Name: "user", SHA256: guard.HashKey(userKey), Models: []string{"llama", "simple"}},
		{Name: "ops", SHA256: guard.HashKey(adminKey), Admin: true},
	})
	require.NoError(t, err)
	auth := guard.NewAuth(keys, nil)
	up := openaitest.Start(t, "up", "llama")
	p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{{Name: "up", URL: up.URL, Type: upstream.TypeVLLM}}})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	store := registry.NewMemoryStore()
	t.Cleanup(store.Close)
	return gatewaytest.Start(t, gateway.Config{
		Services:       []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount, registry.NewService(store, registry.ServiceOptions{}).Mount},
		HTTPMiddleware: []func(http.Handler) http.Handler{auth.HTTP},
		GRPCOptions:    []grpc.ServerOption{auth.GRPCOption()},
	})
}

func TestAuthNativeGRPC(t *testing.T) {
	srv := startAuthed(t)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()

	_, err = c.ServerLive(ctx, &inference.ServerLiveRequest{})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.Equal(t, "missing API key: send it as 'Authorization: Bearer <key>'", status.Convert(err).Message())
	_, err = c.ServerLive(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong"), &inference.ServerLiveRequest{})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
	assert.Equal(t, "invalid API key", status.Convert(err).Message())
	res, err := c.ServerLive(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+userKey), &inference.ServerLiveRequest{})
	require.NoError(t, err)
	assert.True(t, res.GetLive())

	s, err := c.ModelStreamInfer(ctx)
	require.NoError(t, err)
	_, err = s.Recv()
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "streams too")

	h, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err, "health checks need no key")
	assert.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, h.GetStatus())

	_, err = registryv1.NewRegistryServiceClient(conn).ListBackends(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+userKey), &registryv1.ListBackendsRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "the registry needs an admin key")
	_, err = registryv1.NewRegistryServiceClient(conn).ListBackends(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminKey), &registryv1.ListBackendsRequest{})
	require.NoError(t, err)
}

func TestAuthConnectAndGRPCWeb(t *testing.T) {
	srv := startAuthed(t)
	for _, opt := range []connect.ClientOption{connect.WithGRPCWeb(), connect.WithProtoJSON()} {
		c := inferenceconnect.NewGRPCInferenceServiceClient(gatewaytest.H2CClient(), srv.URL, opt)
		_, err := c.ServerLive(context.Background(), &inference.ServerLiveRequest{})
		assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err))
		c = inferenceconnect.NewGRPCInferenceServiceClient(gatewaytest.H2CClient(), srv.URL, opt, withKey(userKey))
		res, err := c.ServerLive(context.Background(), &inference.ServerLiveRequest{})
		require.NoError(t, err)
		assert.True(t, res.GetLive())
	}
}

// withKey sends key as a bearer token on every call of a Connect client.
func withKey(key string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+key)
			return next(ctx, req)
		}
	}))
}

func TestAuthHTTP(t *testing.T) {
	srv := startAuthed(t)
	get := func(path, key string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, body := get("/v2/models/simple", "")
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.JSONEq(t, `{"error":"missing API key: send it as 'Authorization: Bearer <key>'"}`, body, "KServe REST's error shape")
	assert.Equal(t, `Bearer realm="infergate"`, res.Header.Get("WWW-Authenticate"))
	res, _ = get("/v2/models/simple", userKey)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	for _, open := range []string{"/v2/health/live", "/v2/health/ready", "/metrics", "/health"} {
		res, _ = get(open, "")
		assert.Equal(t, http.StatusOK, res.StatusCode, open)
	}
	res, body = get("/v1/models", "sk-nope")
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.JSONEq(t, `{"error":{"message":"invalid API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, body, "OpenAI's error object")
	res, body = get("/olla/vllm/v1/models", "sk-nope")
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.Contains(t, body, `"code":"invalid_api_key"`, "Olla's routes answer OpenAI's error object")
	res, body = get("/v1/messages", "sk-nope")
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.JSONEq(t, `{"type":"error","error":{"type":"authentication_error","message":"invalid API key"}}`, body, "Anthropic's error object")
	// Anthropic's clients send the key as x-api-key.
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v2/models/simple", nil)
	require.NoError(t, err)
	req.Header.Set("X-Api-Key", userKey)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "x-api-key is the key when Authorization is absent")
	c := registryv1connect.NewRegistryServiceClient(http.DefaultClient, srv.URL, withKey(userKey))
	_, err = c.ListBackends(context.Background(), &registryv1.ListBackendsRequest{})
	assert.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err))
	c = registryv1connect.NewRegistryServiceClient(http.DefaultClient, srv.URL, withKey(adminKey))
	_, err = c.ListBackends(context.Background(), &registryv1.ListBackendsRequest{})
	require.NoError(t, err, "an admin key reaches the registry")
}

// The official OpenAI SDK sends its API key the standard way: it gets through with a valid key
// and reads a 401 as an authentication error.
func TestAuthOpenAISDK(t *testing.T) {
	srv := startAuthed(t)
	c := oai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey(userKey), option.WithMaxRetries(0))
	out, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "llama", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", out.Choices[0].Message.Content)

	bad := oai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-bad"), option.WithMaxRetries(0))
	_, err = bad.Models.List(context.Background())
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	assert.Equal(t, "invalid_api_key", apiErr.Code)
}

func TestStaticKeysValidation(t *testing.T) {
	_, err := guard.NewStaticKeys([]guard.KeyConfig{
		{Name: "a", SHA256: "xyz"},
		{Name: "a", SHA256: guard.HashKey("k")},
		{SHA256: guard.HashKey("k2")},
		{Name: "c", SHA256: strings.ToUpper(guard.HashKey("k"))},
	})
	require.Error(t, err)
	for _, want := range []string{"keys[0] (a): sha256 must be 64 hex digits", `keys[1]: duplicate name "a"`,
		"keys[2]: name is required", "keys[3] (c): the same key is listed twice"} {
		assert.Contains(t, err.Error(), want)
	}
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{{Name: "a", SHA256: strings.ToUpper(guard.HashKey("k")), Models: []string{"m"}}})
	require.NoError(t, err)
	p, err := keys.Lookup(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, "a", p.Name)
	assert.True(t, p.MayUse("m"))
	assert.False(t, p.MayUse("other"))
	_, err = keys.Lookup(context.Background(), "K")
	assert.ErrorIs(t, err, guard.ErrUnknownKey)
}

// The operator console is an admin's, and a browser opens it: the key may come as a Basic
// password there (and only there), and a refusal asks for one.
func TestAuthConsole(t *testing.T) {
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{{Name: "user", SHA256: guard.HashKey(userKey)},
		{Name: "ops", SHA256: guard.HashKey(adminKey), Admin: true}})
	require.NoError(t, err)
	h := guard.NewAuth(keys, nil).HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(guard.PrincipalFrom(r.Context()).Name))
	}))
	get := func(path string, set func(*http.Request)) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		set(req)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	none := func(*http.Request) {}
	basic := func(key string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth("anyone", key) } }
	w := get("/console", none)
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, `Basic realm="infergate console", charset="UTF-8"`, w.Header().Get("WWW-Authenticate"))
	assert.Equal(t, http.StatusForbidden, get("/console/api/state", basic(userKey)).Code, "a user's key")
	w = get("/console/api/state", basic(adminKey))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "ops", w.Body.String())
	assert.Equal(t, http.StatusOK, get("/console", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+adminKey) }).Code)
	assert.Equal(t, http.StatusUnauthorized, get("/v1/models", basic(userKey)).Code, "Basic is for the console only")
	assert.Equal(t, http.StatusUnauthorized, get("/consoles", basic(adminKey)).Code, "not a console path")
}
