package app

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildOut  []byte
)

// gatewayBinary builds the gateway once per test run.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "infergate-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "infergate")
		buildOut, buildErr = exec.Command("go", "build", "-o", binPath, "..").CombinedOutput()
	})
	require.NoError(t, buildErr, "%s", buildOut)
	return binPath
}

// startBinary runs the gateway with args and env until the test ends, and waits until it serves.
func startBinary(t *testing.T, env []string, args ...string) string {
	t.Helper()
	addr, _ := startProcess(t, env, "/v2/health/live", args...)
	return addr
}

// startProcess runs the binary with args and env until the test ends (or the test kills it),
// and waits until health answers 200.
func startProcess(t *testing.T, env []string, health string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	bin := gatewayBinary(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"-listen", addr, "-log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + health)
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	return addr, cmd
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func modelsOf(t *testing.T, addr string) string {
	t.Helper()
	res, err := http.Get("http://" + addr + "/v1/models")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// TestBinaryServesEverySurface runs the real binary with a config naming a fake vLLM and a KServe
// upstream (another infergate serving Triton's example models), its built-ins off: the KServe
// upstream's `simple` answers through the gateway's KServe surface, the vLLM model through
// OpenAI's HTTP API, the Connect/gRPC OpenAIService and, by the bridge, as a KServe model with
// text_input; a backend registering itself through the RegistryService appears in /v1/models.
func TestBinaryServesEverySurface(t *testing.T) {
	llm := openaitest.Start(t, "vllm", "llama")
	triton := gatewaytest.Start(t, gateway.Config{})
	cfg := filepath.Join(t.TempDir(), "infergate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`builtin_models: false
upstreams:
  - {name: vllm, url: "`+llm.URL+`", type: vllm, check_interval: 100ms}
  - {name: triton, url: "http://`+triton.Addr+`", type: kserve, check_interval: 100ms, models: [simple]}
`), 0o600))
	addr := startBinary(t, nil, "-config", cfg)
	conn := dial(t, addr)
	kc := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	idx, err := kc.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	var names []string
	for _, m := range idx.GetModels() {
		names = append(names, m.GetName())
	}
	assert.ElementsMatch(t, []string{"simple", "llama"}, names, "the upstream's allowed model and the bridged LLM; no built-ins")

	out, err := kc.ModelInfer(ctx, simpleRequest())
	require.NoError(t, err)
	assert.Equal(t, int32(16), tensor.View[int32](out.GetRawOutputContents()[0])[15], "OUTPUT0 = INPUT0 + INPUT1, computed by the upstream")

	text := binary.LittleEndian.AppendUint32(nil, 2)
	out, err = kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "llama",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append(text, "hi"...)}})
	require.NoError(t, err)
	assert.Equal(t, "Hello from vllm", string(out.GetRawOutputContents()[0][4:]), "the bridge folds the upstream's completion")

	assert.Contains(t, modelsOf(t, addr), `"id":"llama"`)
	list, err := openaiv1.NewOpenAIServiceClient(conn).ListModels(ctx, &openaiv1.ListModelsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetData(), 1)
	assert.Equal(t, "llama", list.GetData()[0].GetId())

	mistral := openaitest.Start(t, "registered", "mistral")
	reg, err := registryv1.NewRegistryServiceClient(conn).Register(ctx, &registryv1.RegisterRequest{
		Backend: &registryv1.Backend{ModelName: "mistral", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT,
			ModelInput: registryv1.ModelInput_MODEL_INPUT_TEXT, Url: mistral.URL, BackendType: registryv1.BackendType_BACKEND_TYPE_VLLM},
		Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)
	require.NotEmpty(t, reg.GetLeaseId())
	require.Eventually(t, func() bool { return strings.Contains(modelsOf(t, addr), `"id":"mistral"`) }, 10*time.Second, 20*time.Millisecond)
	res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"mistral","messages":[]}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(b), "Hello from registered")

	// A tensor backend registers a KServe model by its tensors: the upstream infergate's
	// identity_fp32, reached through the gateway's KServe surface.
	_, err = registryv1.NewRegistryServiceClient(conn).Register(ctx, &registryv1.RegisterRequest{
		Backend: &registryv1.Backend{ModelName: "identity_fp32", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR,
			ModelInput: registryv1.ModelInput_MODEL_INPUT_TENSOR, Url: "http://" + triton.Addr, BackendType: registryv1.BackendType_BACKEND_TYPE_KSERVE,
			TensorModelConfig: &tensorv1.TensorModelConfig{Name: "identity_fp32",
				Inputs:  []*tensorv1.TensorMetadata{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{-1}}},
				Outputs: []*tensorv1.TensorMetadata{{Name: "OUTPUT0", Datatype: "FP32", Shape: []int64{-1}}}}},
		Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)
	var echoed *inference.ModelInferResponse
	require.Eventually(t, func() bool {
		echoed, err = kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "identity_fp32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{3}}},
			RawInputContents: [][]byte{tensor.Bytes([]float32{1.5, 2, -3})}})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the registered tensor model answers: %v", err)
	assert.Equal(t, []float32{1.5, 2, -3}, tensor.View[float32](echoed.GetRawOutputContents()[0]))
}

// TestBinaryReplicasShareRegistry: two gateway processes sharing one redis-server see each other's
// registrations, and a lease that is not renewed disappears from both.
func TestBinaryReplicasShareRegistry(t *testing.T) {
	redis := redistest.Start(t)
	env := []string{"INFERGATE_REDIS_ADDR=" + redis.Addr, "INFERGATE_REGISTRY_MIN_TTL=1s"}
	a := startBinary(t, env)
	b := startBinary(t, env)
	backend := openaitest.Start(t, "shared", "qwen")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registryv1.NewRegistryServiceClient(dial(t, a)).Register(ctx, &registryv1.RegisterRequest{
		Backend: &registryv1.Backend{ModelName: "qwen", ModelType: registryv1.ModelType_MODEL_TYPE_COMPLETIONS,
			ModelInput: registryv1.ModelInput_MODEL_INPUT_TEXT, Url: backend.URL, BackendType: registryv1.BackendType_BACKEND_TYPE_VLLM},
		Ttl: durationpb.New(2 * time.Second)})
	require.NoError(t, err)
	registered := time.Now()
	require.Eventually(t, func() bool { return strings.Contains(modelsOf(t, b), `"id":"qwen"`) }, 10*time.Second, 10*time.Millisecond,
		"registered on A, served by B")
	t.Logf("visible on the other replica after %v", time.Since(registered))
	require.Eventually(t, func() bool { return strings.Contains(modelsOf(t, a), `"id":"qwen"`) }, 10*time.Second, 10*time.Millisecond)

	require.Eventually(t, func() bool {
		return !strings.Contains(modelsOf(t, a), `"id":"qwen"`) && !strings.Contains(modelsOf(t, b), `"id":"qwen"`)
	}, 15*time.Second, 20*time.Millisecond, "the unrenewed lease %s expires on both", reg.GetLeaseId())
	t.Logf("gone from both after %v (ttl 2s)", time.Since(registered))
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}
