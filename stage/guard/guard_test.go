package guard_test

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/bridge"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// guarded is a gateway with API keys and the guard on both hooks, in front of the built-in
// models and a fake vLLM serving llama and qwen (llama also bridged into KServe).
type guarded struct {
	srv  *gatewaytest.Server
	up   *openaitest.Upstream
	conn *grpc.ClientConn
}

func startGuarded(t *testing.T, shed guard.ShedderConfig) *guarded {
	return startGuardedWith(t, guard.Options{Shedder: guard.NewShedder(shed)})
}

func startGuardedWith(t *testing.T, opts guard.Options) *guarded {
	t.Helper()
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{
		{Name: "user", SHA256: guard.HashKey(userKey), Models: []string{"llama", "simple"}},
		{Name: "other", SHA256: guard.HashKey(otherKey)},
	})
	require.NoError(t, err)
	auth := guard.NewAuth(keys, nil)
	g := guard.New(opts)
	up := openaitest.Start(t, "up", "llama", "qwen")
	p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{{Name: "up", URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour}},
		Stages: pipeline.ForAll(pipeline.Admit(g.OpenAI()))})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	srv := gatewaytest.Start(t, gateway.Config{
		Services:       []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount},
		HTTPMiddleware: []func(http.Handler) http.Handler{auth.HTTP},
		GRPCOptions:    []grpc.ServerOption{auth.GRPCOption()},
	})
	srv.Registry.SetAdmission(g.KServe())
	bridge.New(srv.Registry, p).Sync()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &guarded{srv: srv, up: up, conn: conn}
}

const otherKey = "sk-other-0123456789"

func userCtx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+userKey)
}

func simpleRequest(model string) *inference.ModelInferRequest {
	in := make([]int32, 16)
	return &inference.ModelInferRequest{ModelName: model,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		},
		RawInputContents: [][]byte{tensor.Bytes(in), tensor.Bytes(in)}}
}

func (g *guarded) post(t *testing.T, path, body string) (*http.Response, string) {
	return g.postAs(t, userKey, path, body)
}

func (g *guarded) postAs(t *testing.T, key, path, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// An API key's model allow-list holds on every surface, and a model outside it looks like one that
// does not exist (the registry's visibility, which the runtime also sets, answers the same before
// admission; this is the admission's own answer).
func TestGuardModelAllowList(t *testing.T) {
	g := startGuarded(t, guard.ShedderConfig{})
	c := inference.NewGRPCInferenceServiceClient(g.conn)
	_, err := c.ModelInfer(userCtx(), simpleRequest("simple"))
	require.NoError(t, err)
	int8s := simpleRequest("simple_int8")
	for i, in := range int8s.Inputs {
		in.Datatype = "INT8"
		int8s.RawInputContents[i] = make([]byte, 16)
	}
	_, err = c.ModelInfer(userCtx(), int8s)
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, "Request for unknown model: 'simple_int8' is not found", status.Convert(err).Message())

	res, body := g.post(t, "/v2/models/simple_int8/infer", `{"inputs":[]}`)
	assert.Equal(t, http.StatusBadRequest, res.StatusCode, "validation (Triton's) comes before admission: %s", body)
	req := `{"inputs":[{"name":"INPUT0","datatype":"INT8","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},{"name":"INPUT1","datatype":"INT8","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}`
	res, body = g.post(t, "/v2/models/simple_int8/infer", req)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.JSONEq(t, `{"error":"Request for unknown model: 'simple_int8' is not found"}`, body)

	res, body = g.post(t, "/v1/chat/completions", `{"model":"qwen","messages":[]}`)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.JSONEq(t, `{"error":{"message":"The model `+"`qwen`"+` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`, body)
	_, unknown := g.post(t, "/v1/chat/completions", `{"model":"nope","messages":[]}`)
	assert.JSONEq(t, strings.ReplaceAll(body, "qwen", "nope"), unknown, "forbidden and unknown look the same")
	assert.Zero(t, g.up.Requests(), "refused before the upstream")
	res, _ = g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
	assert.Equal(t, http.StatusOK, res.StatusCode)
}

// With every slot busy and no queue, requests are refused at once with a retry hint, on every
// surface; a request through the KServe bridge takes one slot, not two.
func TestGuardShedsLoad(t *testing.T) {
	g := startGuarded(t, guard.ShedderConfig{MaxInFlight: 1, QueueTimeout: time.Second})
	c := inference.NewGRPCInferenceServiceClient(g.conn)

	text := append(binary.LittleEndian.AppendUint32(nil, 2), "hi"...)
	bridged := &inference.ModelInferRequest{ModelName: "llama",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{text}}
	out, err := c.ModelInfer(userCtx(), bridged)
	require.NoError(t, err, "the bridge's inner OpenAI call does not need a second slot")
	assert.Equal(t, "Hello from up", string(out.GetRawOutputContents()[0][4:]))

	for len(g.up.Started()) > 0 {
		<-g.up.Started() // the bridged request's
	}
	release := g.up.Hold()
	defer release()
	held := make(chan error, 1)
	go func() {
		res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
		if res.StatusCode != http.StatusOK {
			t.Errorf("held request: %d %s", res.StatusCode, body)
		}
		held <- nil
	}()
	select {
	case <-g.up.Started():
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the upstream")
	}

	res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, "1", res.Header.Get("Retry-After"))
	assert.JSONEq(t, `{"error":{"message":"the gateway is overloaded; retry later","type":"server_error","param":null,"code":"overloaded"}}`, body)

	var trailer metadata.MD
	_, err = c.ModelInfer(userCtx(), simpleRequest("simple"), grpc.Trailer(&trailer))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, []string{"1"}, trailer.Get("retry-after"))

	res, _ = g.post(t, "/v2/models/simple/infer", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]}]}`)
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, "1", res.Header.Get("Retry-After"))

	release()
	<-held
	_, err = c.ModelInfer(userCtx(), simpleRequest("simple"))
	require.NoError(t, err, "the slot came back")
}
