package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/gen/infergate/registry/v1/registryv1connect"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream/kserveproxy"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// replica is one gateway as the runtime wires it: its own OpenAI proxy, store (its own rueidis
// client), registry service, applier and KServe pool for registered tensor models.
type replica struct {
	srv      *gatewaytest.Server
	pool     *kserveproxy.Proxy
	registry registryv1connect.RegistryServiceClient
	kserve   inference.GRPCInferenceServiceClient
}

func startReplica(t *testing.T, store Store) *replica {
	t.Helper()
	p, err := openai.New(openai.Options{Logger: quiet()})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	svc := NewService(store, ServiceOptions{MinTTL: 100 * time.Millisecond, Logger: quiet()})
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount, svc.Mount}})
	pool, tensors := newPool(t, srv.Registry)
	ap := NewApplier(ApplierOptions{OpenAI: p, Tensors: tensors, CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Second, Logger: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ap.Run(ctx, store)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &replica{srv: srv, pool: pool, registry: registryv1connect.NewRegistryServiceClient(http.DefaultClient, srv.URL),
		kserve: inference.NewGRPCInferenceServiceClient(conn)}
}

// models is the replica's /v1/models ids.
func (r *replica) models(t *testing.T) []string {
	res, err := http.Get(r.srv.URL + "/v1/models")
	require.NoError(t, err)
	defer res.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&list))
	ids := make([]string, len(list.Data))
	for i, m := range list.Data {
		ids[i] = m.ID
	}
	return ids
}

func (r *replica) index(t *testing.T) map[string]string {
	res, err := r.kserve.RepositoryIndex(context.Background(), &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	m := map[string]string{}
	for _, x := range res.Models {
		m[x.Name] = x.State
	}
	return m
}

// backendLease registers through a replica and heartbeats, as a backend does, until stopped.
type backendLease struct {
	id   string
	stop func()
}

func register(t *testing.T, via *replica, b *registryv1.Backend, ttl time.Duration) *backendLease {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	res, err := via.registry.Register(ctx, &registryv1.RegisterRequest{Backend: b, Ttl: durationpb.New(ttl)})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(res.HeartbeatInterval.AsDuration())
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := via.registry.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: res.LeaseId}); err != nil && ctx.Err() == nil {
					t.Errorf("heartbeat: %v", err)
					return
				}
			}
		}
	})
	l := &backendLease{id: res.LeaseId, stop: sync.OnceFunc(func() { cancel(); wg.Wait() })}
	t.Cleanup(l.stop)
	return l
}

// Two gateway replicas sharing one redis-server: an OpenAI backend registered on A appears in
// B's /v1/models and answers chat through B; when its heartbeats stop it disappears from both.
func TestTwoReplicasOpenAIBackend(t *testing.T) {
	redis := redistest.Start(t)
	a := startReplica(t, newRedisReplica(t, redis))
	b := startReplica(t, newRedisReplica(t, redis))
	fake := openaitest.Start(t, "fake", "llama-registered")
	assert.NotContains(t, b.models(t), "llama-registered")

	lease := register(t, a, &registryv1.Backend{ModelName: "llama-registered", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT,
		Url: fake.URL, BackendType: registryv1.BackendType_BACKEND_TYPE_VLLM}, 300*time.Millisecond)
	require.Eventually(t, func() bool { return slices.Contains(b.models(t), "llama-registered") }, wait, 10*time.Millisecond,
		"the backend registered on A shows in B's /v1/models")
	require.Eventually(t, func() bool { return slices.Contains(a.models(t), "llama-registered") }, wait, 10*time.Millisecond,
		"and in A's, once A's own health check passed")

	sdk := oai.NewClient(option.WithBaseURL(b.srv.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	var hdr http.Header
	chat, err := sdk.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model:    "llama-registered",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
	}, option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(r)
		if res != nil {
			hdr = res.Header
		}
		return res, err
	}))
	require.NoError(t, err, "chat through B")
	assert.Equal(t, "llama-registered", chat.Model)
	require.Len(t, chat.Choices, 1)
	assert.NotEmpty(t, chat.Choices[0].Message.Content)
	assert.Equal(t, int64(1), fake.Requests(), "the registered backend answered")
	assert.Equal(t, EndpointName(lease.id), hdr.Get(openai.HeaderEndpoint))

	// Kept alive by heartbeats for several ttls...
	time.Sleep(time.Second)
	assert.Contains(t, b.models(t), "llama-registered")
	// ... and gone from both replicas once they stop.
	lease.stop()
	require.Eventually(t, func() bool {
		return !slices.Contains(a.models(t), "llama-registered") && !slices.Contains(b.models(t), "llama-registered")
	}, wait, 10*time.Millisecond)
	_, err = sdk.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "llama-registered", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

// echoModel is what a tensor backend serves: text_output = text_input.
func echoModel(t *testing.T, name string) engines.Model {
	m, err := engines.NewRemoteModel(tensorDesc(name), func(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
		in := req.Input("text_input")
		return send(&engines.Response{Outputs: []engines.Tensor{{Name: "text_output", Datatype: in.Datatype, Shape: in.Shape, Data: in.Data}}})
	})
	require.NoError(t, err)
	return m
}

func bytesRequest(model string, elems ...string) *inference.ModelInferRequest {
	var raw []byte
	for _, e := range elems {
		raw = tensor.AppendBytes(raw, []byte(e))
	}
	return &inference.ModelInferRequest{ModelName: model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{int64(len(elems))}}},
		RawInputContents: [][]byte{raw}}
}

// serving lists the pool's endpoints that are healthy and serve model.
func (r *replica) serving(model string) []string {
	var out []string
	for _, s := range r.pool.Status() {
		if s.Healthy && slices.Contains(s.Models, model) {
			out = append(out, s.Name)
		}
	}
	return out
}

// Tensor backends (gateways serving a model over KServe gRPC) registered on A and on B show in
// both replicas' RepositoryIndex, metadata and config, share ModelInfer through either replica,
// and leave both when their leases expire: the model stays while one lease lives.
func TestTwoReplicasTensorBackend(t *testing.T) {
	redis := redistest.Start(t)
	a := startReplica(t, newRedisReplica(t, redis))
	b := startReplica(t, newRedisReplica(t, redis))
	backend := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "echo_registered"))
	backend2 := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "echo_registered"))

	lease := register(t, a, &registryv1.Backend{ModelName: "echo_registered", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR,
		Url: backend.URL, TensorModelConfig: tensorDesc("")}, 300*time.Millisecond)
	require.Eventually(t, func() bool { return b.index(t)["echo_registered"] == "READY" }, wait, 10*time.Millisecond,
		"the tensor model registered on A shows in B's RepositoryIndex")
	// Each replica checks the backend's health itself: A's first check may end after B's.
	require.Eventually(t, func() bool { return a.index(t)["echo_registered"] == "READY" }, wait, 10*time.Millisecond,
		"the tensor model registered on A shows in A's RepositoryIndex")
	assert.Equal(t, []string{EndpointName(lease.id)}, b.serving("echo_registered"))
	ctx := context.Background()

	meta, err := b.kserve.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "echo_registered"})
	require.NoError(t, err)
	assert.Equal(t, engines.RemotePlatform, meta.Platform)
	require.Len(t, meta.Inputs, 1)
	assert.Equal(t, "text_input", meta.Inputs[0].Name)
	cfg, err := b.kserve.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "echo_registered"})
	require.NoError(t, err)
	assert.Equal(t, "echo_registered", cfg.Config.Name)

	res, err := b.kserve.ModelInfer(ctx, bytesRequest("echo_registered", "hello", "world"))
	require.NoError(t, err, "ModelInfer through B reaches the backend")
	require.Len(t, res.Outputs, 1)
	assert.Equal(t, "text_output", res.Outputs[0].Name)
	assert.Equal(t, []int64{2}, res.Outputs[0].Shape)
	elems, err := tensor.SplitBytes(res.RawOutputContents[0])
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("hello"), []byte("world")}, elems)
	ran := backend.Registry.Lookup("echo_registered")
	assert.Equal(t, uint64(1), ran.Stats.Inferences(), "the backend ran it")

	// The gateway validates against the registered config before forwarding.
	bad := bytesRequest("echo_registered", "x")
	bad.Inputs[0].Datatype = "FP32"
	bad.RawInputContents[0] = make([]byte, 4)
	_, err = b.kserve.ModelInfer(ctx, bad)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, uint64(1), ran.Stats.Inferences(), "a bad request never reaches the backend")

	// A second backend of the model, registered on B: both replicas route to both.
	lease2 := register(t, b, &registryv1.Backend{ModelName: "echo_registered", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR,
		Url: backend2.URL, TensorModelConfig: tensorDesc("echo_registered")}, 300*time.Millisecond)
	both := []string{EndpointName(lease.id), EndpointName(lease2.id)}
	slices.Sort(both)
	require.Eventually(t, func() bool {
		return slices.Equal(both, sorted(a.serving("echo_registered"))) && slices.Equal(both, sorted(b.serving("echo_registered")))
	}, wait, 10*time.Millisecond)
	ran2 := backend2.Registry.Lookup("echo_registered")
	for _, r := range []*replica{a, b} {
		for range 2 {
			_, err := r.kserve.ModelInfer(ctx, bytesRequest("echo_registered", "x"))
			require.NoError(t, err)
		}
	}
	assert.Equal(t, uint64(3), ran.Stats.Inferences(), "each replica shares its requests between the backends")
	assert.Equal(t, uint64(2), ran2.Stats.Inferences())

	// The first lease expires: the model stays, served by the second backend.
	lease.stop()
	require.Eventually(t, func() bool {
		return slices.Equal([]string{EndpointName(lease2.id)}, a.serving("echo_registered")) &&
			slices.Equal([]string{EndpointName(lease2.id)}, b.serving("echo_registered"))
	}, wait, 10*time.Millisecond)
	assert.Equal(t, "READY", a.index(t)["echo_registered"])
	_, err = a.kserve.ModelInfer(ctx, bytesRequest("echo_registered", "x"))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), ran2.Stats.Inferences())
	assert.Equal(t, uint64(3), ran.Stats.Inferences())

	lease2.stop()
	require.Eventually(t, func() bool {
		_, inA := a.index(t)["echo_registered"]
		_, inB := b.index(t)["echo_registered"]
		return !inA && !inB
	}, wait, 10*time.Millisecond)
	_, err = b.kserve.ModelInfer(ctx, bytesRequest("echo_registered", "x"))
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, "Request for unknown model: 'echo_registered' is not found", status.Convert(err).Message())
	assert.Empty(t, a.pool.Status(), "no endpoint is left behind")
	assert.Empty(t, b.pool.Status())
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
