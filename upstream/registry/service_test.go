package registry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/gen/infergate/registry/v1/registryv1connect"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// client is one way of calling the service, with errors as a code and message.
type client struct {
	name string
	c    registryv1connect.RegistryServiceClient
}

// clients of one gateway: Connect (HTTP/1.1), gRPC and gRPC-Web through connect-go (the mux),
// and grpc-go (the native gRPC server).
func clients(t *testing.T, srv *gatewaytest.Server) []client {
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return []client{
		{"connect", registryv1connect.NewRegistryServiceClient(http.DefaultClient, srv.URL)},
		{"grpc-web", registryv1connect.NewRegistryServiceClient(http.DefaultClient, srv.URL, connect.WithGRPCWeb())},
		{"connect-grpc", registryv1connect.NewRegistryServiceClient(gatewaytest.H2CClient(), srv.URL, connect.WithGRPC())},
		{"grpc-go", grpcClient{registryv1.NewRegistryServiceClient(conn)}},
	}
}

// grpcClient adapts the grpc-go client to the Connect client's interface, errors as connect errors.
type grpcClient struct {
	c registryv1.RegistryServiceClient
}

func grpcErr(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
}

func (g grpcClient) Register(ctx context.Context, r *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	res, err := g.c.Register(ctx, r)
	return res, grpcErr(err)
}

func (g grpcClient) Heartbeat(ctx context.Context, r *registryv1.HeartbeatRequest) (*registryv1.HeartbeatResponse, error) {
	res, err := g.c.Heartbeat(ctx, r)
	return res, grpcErr(err)
}

func (g grpcClient) Deregister(ctx context.Context, r *registryv1.DeregisterRequest) (*registryv1.DeregisterResponse, error) {
	res, err := g.c.Deregister(ctx, r)
	return res, grpcErr(err)
}

func (g grpcClient) ListBackends(ctx context.Context, r *registryv1.ListBackendsRequest) (*registryv1.ListBackendsResponse, error) {
	res, err := g.c.ListBackends(ctx, r)
	return res, grpcErr(err)
}

func startService(t *testing.T, store Store, opts ServiceOptions) *gatewaytest.Server {
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	svc := NewService(store, opts)
	return gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){svc.Mount}})
}

func codeOf(err error) connect.Code { return connect.CodeOf(err) }

func messageOf(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return ""
}

// tensorDesc describes a model echoing a BYTES input.
func tensorDesc(name string) *tensorv1.TensorModelConfig {
	return &tensorv1.TensorModelConfig{Name: name,
		Inputs:  []*tensorv1.TensorMetadata{{Name: "text_input", Datatype: "BYTES", Shape: []int64{-1}}},
		Outputs: []*tensorv1.TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1}}}}
}

func TestServiceValidation(t *testing.T) {
	srv := startService(t, NewMemoryStore(), ServiceOptions{})
	valid := func() *registryv1.Backend {
		return &registryv1.Backend{ModelName: "m", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT, Url: "http://127.0.0.1:9"}
	}
	tensorB := func() *registryv1.Backend {
		return &registryv1.Backend{ModelName: "t", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR, Url: "http://127.0.0.1:9", TensorModelConfig: tensorDesc("")}
	}
	tritonCfg, err := proto.Marshal(&inference.ModelConfig{Name: "other"})
	require.NoError(t, err)
	cases := []struct {
		name string
		req  *registryv1.RegisterRequest
		msg  string
	}{
		{"no backend", &registryv1.RegisterRequest{}, "backend is required"},
		{"no name", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.ModelName = ""; return b }()}, "backend.model_name is required"},
		{"control char", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.ModelName = "a\nb"; return b }()}, "has control characters"},
		{"long name", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.ModelName = strings.Repeat("x", 300); return b }()}, "backend.model_name is 300 bytes; at most 256"},
		{"no type", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.ModelType = 0; return b }()}, "backend.model_type is required (chat, completions, embeddings or tensor)"},
		{"unknown type", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.ModelType = 42; return b }()}, "backend.model_type 42 is not a known model type"},
		{"no url", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Url = ""; return b }()}, "backend.url is required"},
		{"relative url", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Url = "/v1"; return b }()}, `backend.url "/v1" must be an absolute http:// or https:// URL`},
		{"ftp url", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Url = "ftp://h/x"; return b }()}, "must be an absolute http:// or https:// URL"},
		{"credentials", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Url = "http://u:p@h"; return b }()}, "must not hold credentials"},
		{"query", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Url = "http://h/?a=1"; return b }()}, "must not have a query or fragment"},
		{"priority", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.Priority = -1; return b }()}, "backend.priority must be >= 0, got -1"},
		{"chat tokens", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := valid()
			b.ModelInput = registryv1.ModelInput_MODEL_INPUT_TOKENS
			return b
		}()}, "chat models take text"},
		{"chat tensor input", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := valid()
			b.ModelInput = registryv1.ModelInput_MODEL_INPUT_TENSOR
			return b
		}()}, "tensor input needs model_type tensor, not chat"},
		{"chat kserve", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := valid()
			b.BackendType = registryv1.BackendType_BACKEND_TYPE_KSERVE
			return b
		}()}, "kserve backends serve tensor models, not chat"},
		{"chat with tensor config", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := valid(); b.TensorModelConfig = tensorDesc("m"); return b }()}, "backend.tensor_model_config is only for tensor models, not chat"},
		{"tensor without config", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := tensorB(); b.TensorModelConfig = nil; return b }()}, "backend.tensor_model_config is required for tensor models"},
		{"tensor vllm", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := tensorB()
			b.BackendType = registryv1.BackendType_BACKEND_TYPE_VLLM
			return b
		}()}, "tensor models are served by kserve backends, not vllm"},
		{"tensor text", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := tensorB()
			b.ModelInput = registryv1.ModelInput_MODEL_INPUT_TEXT
			return b
		}()}, "tensor models take tensor input, not text"},
		{"tensor url path", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := tensorB(); b.Url = "http://h:1/v2"; return b }()}, "a kserve backend's URL is its gRPC address and has no path"},
		{"tensor config name", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := tensorB(); b.TensorModelConfig.Name = "x"; return b }()}, `backend.tensor_model_config names model "x", but backend.model_name is "t"`},
		{"tensor bad datatype", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := tensorB()
			b.TensorModelConfig.Inputs[0].Datatype = "FP33"
			return b
		}()}, "backend.tensor_model_config: remote model 't': input 'text_input' has unknown datatype 'FP33'"},
		{"tensor no outputs", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend { b := tensorB(); b.TensorModelConfig.Outputs = nil; return b }()}, "the config has no outputs"},
		{"triton config other name", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := tensorB()
			b.TensorModelConfig = &tensorv1.TensorModelConfig{TritonModelConfig: tritonCfg}
			return b
		}()}, "triton_model_config names model 'other'"},
		{"triton config garbage", &registryv1.RegisterRequest{Backend: func() *registryv1.Backend {
			b := tensorB()
			b.TensorModelConfig = &tensorv1.TensorModelConfig{TritonModelConfig: []byte{0xff, 0xff}}
			return b
		}()}, "triton_model_config is not a serialized inference.ModelConfig"},
		{"negative ttl", &registryv1.RegisterRequest{Backend: valid(), Ttl: durationpb.New(-time.Second)}, "ttl -1s is negative"},
		{"invalid ttl", &registryv1.RegisterRequest{Backend: valid(), Ttl: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "ttl: "},
	}
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		for _, tc := range cases {
			_, err := c.c.Register(ctx, tc.req)
			assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%s %s: %v", c.name, tc.name, err)
			assert.Contains(t, messageOf(err), tc.msg, "%s %s", c.name, tc.name)
		}
		_, err := c.c.Heartbeat(ctx, &registryv1.HeartbeatRequest{})
		assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), c.name)
		assert.Equal(t, "lease_id is required", messageOf(err), c.name)
		_, err = c.c.Deregister(ctx, &registryv1.DeregisterRequest{})
		assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), c.name)
	}
	// Nothing invalid was stored.
	res, err := clients(t, srv)[0].c.ListBackends(ctx, &registryv1.ListBackendsRequest{})
	require.NoError(t, err)
	assert.Empty(t, res.Registrations)
}

func TestServiceLeaseLifecycle(t *testing.T) {
	store := NewMemoryStore()
	t.Cleanup(store.Close)
	srv := startService(t, store, ServiceOptions{MinTTL: 2 * time.Second, MaxTTL: time.Minute})
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		// Defaults are derived and the ttl is clamped to the bounds.
		res, err := c.c.Register(ctx, &registryv1.RegisterRequest{
			Backend: &registryv1.Backend{ModelName: "m-" + c.name, ModelType: registryv1.ModelType_MODEL_TYPE_EMBEDDINGS, Url: "http://127.0.0.1:9"},
			Ttl:     durationpb.New(time.Millisecond)})
		require.NoError(t, err, c.name)
		assert.Equal(t, 2*time.Second, res.Ttl.AsDuration(), "%s: clamped up to MinTTL", c.name)
		assert.Equal(t, 2*time.Second/3, res.HeartbeatInterval.AsDuration(), c.name)
		id := res.LeaseId

		list, err := c.c.ListBackends(ctx, &registryv1.ListBackendsRequest{})
		require.NoError(t, err, c.name)
		var got *registryv1.Registration
		for _, r := range list.Registrations {
			if r.LeaseId == id {
				got = r
			}
		}
		require.NotNil(t, got, c.name)
		assert.Equal(t, registryv1.ModelInput_MODEL_INPUT_TEXT, got.Backend.ModelInput, "derived input")
		assert.Equal(t, registryv1.BackendType_BACKEND_TYPE_OPENAI, got.Backend.BackendType, "derived backend type")
		assert.Equal(t, 2*time.Second, got.Ttl.AsDuration())
		assert.WithinDuration(t, time.Now().Add(2*time.Second), got.ExpireTime.AsTime(), time.Second)

		hb, err := c.c.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: id})
		require.NoError(t, err, c.name)
		assert.Equal(t, 2*time.Second, hb.Ttl.AsDuration())

		// Update keeps the lease; an hour is clamped down to MaxTTL.
		up, err := c.c.Register(ctx, &registryv1.RegisterRequest{LeaseId: id, Ttl: durationpb.New(time.Hour),
			Backend: &registryv1.Backend{ModelName: "m-" + c.name, ModelType: registryv1.ModelType_MODEL_TYPE_EMBEDDINGS,
				ModelInput: registryv1.ModelInput_MODEL_INPUT_TOKENS, Url: "http://127.0.0.1:10", Priority: 3}})
		require.NoError(t, err, c.name)
		assert.Equal(t, id, up.LeaseId)
		assert.Equal(t, time.Minute, up.Ttl.AsDuration())

		_, err = c.c.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: id})
		require.NoError(t, err, c.name)

		// The lease is gone: the backend is told to register again.
		_, err = c.c.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: id})
		assert.Equal(t, connect.CodeNotFound, codeOf(err), "%s: %v", c.name, err)
		assert.Equal(t, "lease '"+id+"' is not found (expired, deregistered or never granted); register again", messageOf(err), c.name)
		_, err = c.c.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: id})
		assert.Equal(t, connect.CodeNotFound, codeOf(err), c.name)
		_, err = c.c.Register(ctx, &registryv1.RegisterRequest{LeaseId: id,
			Backend: &registryv1.Backend{ModelName: "m", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT, Url: "http://h"}})
		assert.Equal(t, connect.CodeNotFound, codeOf(err), c.name)
		_, err = c.c.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: "made-up"})
		assert.Equal(t, connect.CodeNotFound, codeOf(err), c.name)
	}
}

// A lease that gets no heartbeat expires: Heartbeat then says NOT_FOUND over gRPC too.
func TestServiceHeartbeatAfterExpiry(t *testing.T) {
	store := NewMemoryStore()
	t.Cleanup(store.Close)
	srv := startService(t, store, ServiceOptions{MinTTL: 50 * time.Millisecond})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := registryv1.NewRegistryServiceClient(conn)
	ctx := context.Background()
	res, err := c.Register(ctx, &registryv1.RegisterRequest{Ttl: durationpb.New(50 * time.Millisecond),
		Backend: &registryv1.Backend{ModelName: "m", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT, Url: "http://h"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		list, err := c.ListBackends(cctx, &registryv1.ListBackendsRequest{}, grpc.WaitForReady(true))
		return err == nil && len(list.Registrations) == 0
	}, 2*wait, 10*time.Millisecond)
	_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: res.LeaseId})
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "register again")
}
