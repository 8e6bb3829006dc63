package kserve_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // registers the gzip compressor for grpc-go clients
	"google.golang.org/protobuf/encoding/protojson"
)

func TestServerAPIs(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			live, err := call[inference.ServerLiveRequest, inference.ServerLiveResponse](ctx, c, "ServerLive", &inference.ServerLiveRequest{})
			require.NoError(t, err)
			assert.True(t, live.Live)
			ready, err := call[inference.ServerReadyRequest, inference.ServerReadyResponse](ctx, c, "ServerReady", &inference.ServerReadyRequest{})
			require.NoError(t, err)
			assert.True(t, ready.Ready)
			md, err := call[inference.ServerMetadataRequest, inference.ServerMetadataResponse](ctx, c, "ServerMetadata", &inference.ServerMetadataRequest{})
			require.NoError(t, err)
			assert.Equal(t, "triton", md.Name, "Triton's example clients check the name")
			assert.NotEmpty(t, md.Version)
			want := []string{"model_configuration", "model_repository", "statistics", "sequence", "parameters", "binary_tensor_data", "classification"}
			if shm.Supported() {
				want = append(want, "system_shared_memory") // on by default where it can be
			}
			assert.ElementsMatch(t, want, md.Extensions)

			for _, v := range []string{"", "1"} {
				mr, err := call[inference.ModelReadyRequest, inference.ModelReadyResponse](ctx, c, "ModelReady", &inference.ModelReadyRequest{Name: "simple", Version: v})
				require.NoError(t, err)
				assert.True(t, mr.Ready)
			}
			mr, err := call[inference.ModelReadyRequest, inference.ModelReadyResponse](ctx, c, "ModelReady", &inference.ModelReadyRequest{Name: "nope"})
			require.NoError(t, err, "released Triton answers OK/false for unknown models")
			assert.False(t, mr.Ready)

			idx, err := call[inference.RepositoryIndexRequest, inference.RepositoryIndexResponse](ctx, c, "RepositoryIndex", &inference.RepositoryIndexRequest{})
			require.NoError(t, err)
			var names []string
			for _, m := range idx.Models {
				names = append(names, m.Name)
				assert.Equal(t, "READY", m.State)
				assert.Equal(t, "1", m.Version)
			}
			assert.ElementsMatch(t, []string{"simple", "simple_int8", "simple_string", "simple_identity", "simple_sequence",
				"simple_dyna_sequence", "repeat_int32", "square_int32", "identity_fp32"}, names)

			for _, rpc := range []string{"CudaSharedMemoryRegister", "TraceSetting", "LogSettings"} {
				var err error
				switch rpc {
				case "CudaSharedMemoryRegister":
					_, err = call[inference.CudaSharedMemoryRegisterRequest, inference.CudaSharedMemoryRegisterResponse](ctx, c, rpc, &inference.CudaSharedMemoryRegisterRequest{Name: "r"})
				case "TraceSetting":
					_, err = call[inference.TraceSettingRequest, inference.TraceSettingResponse](ctx, c, rpc, &inference.TraceSettingRequest{})
				case "LogSettings":
					_, err = call[inference.LogSettingsRequest, inference.LogSettingsResponse](ctx, c, rpc, &inference.LogSettingsRequest{})
				}
				require.Equal(t, connect.CodeUnimplemented, codeOf(err), rpc)
				assert.Contains(t, messageOf(err), "infergate does not implement the ")
			}
			_, err = call[inference.ServerLiveRequest, inference.ServerLiveResponse](ctx, c, "NoSuchMethod", &inference.ServerLiveRequest{})
			assert.Equal(t, connect.CodeUnimplemented, codeOf(err))
		})
	}
}

func TestStatisticsCountRequests(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	stats := func(name string) *inference.ModelStatisticsResponse {
		s, err := call[inference.ModelStatisticsRequest, inference.ModelStatisticsResponse](ctx, c, "ModelStatistics", &inference.ModelStatisticsRequest{Name: name})
		require.NoError(t, err)
		return s
	}
	before := stats("simple")
	require.Len(t, before.ModelStats, 1, "Triton's simple client expects exactly one entry")
	for range 5 {
		_, err := infer(ctx, c, simpleRequest(""))
		require.NoError(t, err)
	}
	bad := simpleRequest("")
	bad.RawInputContents[0] = nil
	_, err := infer(ctx, c, bad)
	require.Error(t, err)
	after := stats("simple").ModelStats[0]
	assert.Equal(t, "simple", after.Name)
	assert.Equal(t, "1", after.Version)
	assert.Equal(t, before.ModelStats[0].InferenceCount+5, after.InferenceCount)
	assert.Equal(t, before.ModelStats[0].ExecutionCount+5, after.ExecutionCount)
	assert.Equal(t, before.ModelStats[0].InferenceStats.Success.Count+5, after.InferenceStats.Success.Count)
	assert.Equal(t, before.ModelStats[0].InferenceStats.Fail.Count+1, after.InferenceStats.Fail.Count)
	assert.Positive(t, after.InferenceStats.Success.Ns)
	assert.Positive(t, after.InferenceStats.ComputeInfer.Ns)
	assert.InDelta(t, time.Now().UnixMilli(), int64(after.LastInference), float64(time.Minute.Milliseconds()))
	assert.Len(t, stats("").ModelStats, 9, "an empty name lists every model")

	// The same counts reach Prometheus.
	res, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(body), `nv_inference_request_success{model="simple",version="1"} 5`)
	assert.Contains(t, string(body), `nv_inference_request_failure{model="simple",version="1"} 1`)
	assert.Contains(t, string(body), `infergate_request_duration_seconds_count{model="simple",version="1"} 6`)
}

func TestUnloadAndLoad(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[1]
	_, err := call[inference.RepositoryModelUnloadRequest, inference.RepositoryModelUnloadResponse](ctx, c, "RepositoryModelUnload", &inference.RepositoryModelUnloadRequest{ModelName: "simple"})
	require.NoError(t, err)
	mr, err := call[inference.ModelReadyRequest, inference.ModelReadyResponse](ctx, c, "ModelReady", &inference.ModelReadyRequest{Name: "simple"})
	require.NoError(t, err)
	assert.False(t, mr.Ready)
	_, err = infer(ctx, c, simpleRequest(""))
	requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'simple' has no available versions")
	v1 := simpleRequest("")
	v1.ModelVersion = "1"
	_, err = infer(ctx, c, v1)
	requireStatus(t, err, connect.CodeUnavailable, "Request for unknown model: 'simple' version 1 is not at ready state")
	idx, err := call[inference.RepositoryIndexRequest, inference.RepositoryIndexResponse](ctx, c, "RepositoryIndex", &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	assert.Equal(t, "UNAVAILABLE", idx.Models[0].State)
	readyOnly, err := call[inference.RepositoryIndexRequest, inference.RepositoryIndexResponse](ctx, c, "RepositoryIndex", &inference.RepositoryIndexRequest{Ready: true})
	require.NoError(t, err)
	assert.Len(t, readyOnly.Models, 8)

	_, err = call[inference.RepositoryModelLoadRequest, inference.RepositoryModelLoadResponse](ctx, c, "RepositoryModelLoad", &inference.RepositoryModelLoadRequest{ModelName: "simple"})
	require.NoError(t, err)
	_, err = infer(ctx, c, simpleRequest(""))
	require.NoError(t, err)
	_, err = call[inference.RepositoryModelLoadRequest, inference.RepositoryModelLoadResponse](ctx, c, "RepositoryModelLoad", &inference.RepositoryModelLoadRequest{ModelName: "nope"})
	requireStatus(t, err, connect.CodeInvalidArgument, "failed to load 'nope', failed to poll from model repository")
}

func TestLargeTensorRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB round trip")
	}
	srv := start(t)
	const n = 16 << 20 // 64 MiB of FP32
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(i)
	}
	req := &inference.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{n})},
		RawInputContents: [][]byte{tensor.Bytes(in)},
	}
	for _, c := range clients(t, srv)[:2] {
		t.Run(c.name, func(t *testing.T) {
			res, err := infer(context.Background(), c, req)
			require.NoError(t, err)
			require.Len(t, res.RawOutputContents[0], 64<<20)
			assert.True(t, bytes.Equal(req.RawInputContents[0], res.RawOutputContents[0]))
			assert.Equal(t, []int64{n}, res.Outputs[0].Shape)
		})
	}
}

func TestGzipRequests(t *testing.T) {
	srv := start(t)
	cs := clients(t, srv)
	res, err := cs[0].conn.NewStream(context.Background(), &grpc.StreamDesc{}, servicePath+"ModelInfer", grpc.UseCompressor("gzip"))
	require.NoError(t, err)
	require.NoError(t, res.SendMsg(simpleRequest("gz")))
	require.NoError(t, res.CloseSend())
	out := new(inference.ModelInferResponse)
	require.NoError(t, res.RecvMsg(out))
	assert.Equal(t, "gz", out.Id)
	assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(out.RawOutputContents[0]))

	for _, c := range cs[1:] {
		c.options = append(c.options, connect.WithSendGzip())
		r, err := infer(context.Background(), c, simpleRequest("gz"))
		require.NoError(t, err, c.name)
		assert.Equal(t, "gz", r.Id)
	}

	// And a raw Connect call with a gzip body, as curl would send it.
	body, err := protojson.Marshal(simpleRequest("curl"))
	require.NoError(t, err)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(body)
	zw.Close()
	hreq, _ := http.NewRequest(http.MethodPost, srv.URL+servicePath+"ModelInfer", &zipped)
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Content-Encoding", "gzip")
	hres, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	defer hres.Body.Close()
	rb, _ := io.ReadAll(hres.Body)
	require.Equal(t, http.StatusOK, hres.StatusCode, string(rb))
	assert.Contains(t, string(rb), `"id":"curl"`)
}

func TestConcurrentCallsOnOneConnection(t *testing.T) {
	srv := start(t)
	c := clients(t, srv)[0]
	errs := make(chan error, 200)
	for i := range 200 {
		go func() {
			id := "c" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
			res, err := infer(context.Background(), c, simpleRequest(id))
			if err == nil && res.Id != id {
				err = assert.AnError
			}
			errs <- err
		}()
	}
	for range 200 {
		require.NoError(t, <-errs)
	}
}

// grpcurl runs the pinned grpcurl (tools/grpcurl/go.mod) against addr.
func grpcurl(t *testing.T, args ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	modfile := filepath.Join(filepath.Dir(file), "..", "..", "tools", "grpcurl", "go.mod")
	cmd := exec.Command("go", append([]string{"tool", "-modfile=" + modfile, "grpcurl"}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "grpcurl %v: %s", args, out)
	return string(out)
}

func TestGrpcurlViaReflection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds grpcurl")
	}
	srv := start(t)
	list := grpcurl(t, "-plaintext", srv.Addr, "list")
	assert.Contains(t, list, "inference.GRPCInferenceService")
	assert.Contains(t, list, "grpc.health.v1.Health")

	meta := grpcurl(t, "-plaintext", "-d", `{"name":"simple"}`, srv.Addr, "inference.GRPCInferenceService/ModelMetadata")
	assert.Contains(t, meta, `"platform": "infergate_cpu"`)

	// Triton's simple request, typed, as a newcomer would type it.
	out := grpcurl(t, "-plaintext", "-d", `{"model_name":"simple","inputs":[`+
		`{"name":"INPUT0","datatype":"INT32","shape":[1,16],"contents":{"int_contents":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}},`+
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"contents":{"int_contents":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}}]}`,
		srv.Addr, "inference.GRPCInferenceService/ModelInfer")
	var res inference.ModelInferResponse
	require.NoError(t, protojson.Unmarshal([]byte(out), &res))
	assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(res.RawOutputContents[0]))

	health := grpcurl(t, "-plaintext", srv.Addr, "grpc.health.v1.Health/Check")
	assert.Contains(t, health, `"status": "SERVING"`)

	for _, e := range srv.Registry.Entries() {
		m := e.Name()
		md := grpcurl(t, "-plaintext", "-d", `{"name":"`+m+`"}`, srv.Addr, "inference.GRPCInferenceService/ModelMetadata")
		assert.Contains(t, md, `"name": "`+m+`"`)
		cfg := grpcurl(t, "-plaintext", "-d", `{"name":"`+m+`"}`, srv.Addr, "inference.GRPCInferenceService/ModelConfig")
		assert.Contains(t, cfg, `"name": "`+m+`"`)
	}

	// One inference per kind of model: BYTES (base64 in JSON), identity, sequence, decoupled stream.
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	var ins0, ins1 []string
	for i := range 16 {
		ins0 = append(ins0, `"`+b64(strconv.Itoa(i))+`"`)
		ins1 = append(ins1, `"`+b64("1")+`"`)
	}
	out = grpcurl(t, "-plaintext", "-d", `{"model_name":"simple_string","inputs":[`+
		`{"name":"INPUT0","datatype":"BYTES","shape":[1,16],"contents":{"bytes_contents":[`+strings.Join(ins0, ",")+`]}},`+
		`{"name":"INPUT1","datatype":"BYTES","shape":[1,16],"contents":{"bytes_contents":[`+strings.Join(ins1, ",")+`]}}]}`,
		srv.Addr, "inference.GRPCInferenceService/ModelInfer")
	res.Reset()
	require.NoError(t, protojson.Unmarshal([]byte(out), &res))
	sums, err := tensor.SplitBytes(res.RawOutputContents[0])
	require.NoError(t, err)
	assert.Equal(t, "16", string(sums[15]))

	out = grpcurl(t, "-plaintext", "-d", `{"model_name":"simple_sequence","parameters":{"sequence_id":{"int64_param":"77"},"sequence_start":{"bool_param":true}},`+
		`"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"contents":{"int_contents":[41]}}]}`,
		srv.Addr, "inference.GRPCInferenceService/ModelInfer")
	res.Reset()
	require.NoError(t, protojson.Unmarshal([]byte(out), &res))
	assert.Equal(t, []int32{42}, int32s(res.RawOutputContents[0]))

	out = grpcurl(t, "-plaintext", "-d", `{"model_name":"repeat_int32","id":"g","inputs":[`+
		`{"name":"IN","datatype":"INT32","shape":[3],"contents":{"int_contents":[4,5,6]}},`+
		`{"name":"DELAY","datatype":"UINT32","shape":[3],"contents":{"uint_contents":[0,0,0]}},`+
		`{"name":"WAIT","datatype":"UINT32","shape":[1],"contents":{"uint_contents":[0]}}]}`,
		srv.Addr, "inference.GRPCInferenceService/ModelStreamInfer")
	assert.Equal(t, 3, strings.Count(out, `"id": "g"`), "three streamed responses:\n%s", out)
}

func TestMessageSizeLimitIsConfigurable(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{MaxMessageBytes: 1 << 20})
	const n = 512 << 10 // 2 MiB of FP32, over the 1 MiB limit
	req := &inference.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{n})},
		RawInputContents: [][]byte{make([]byte, 4*n)},
	}
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			_, err := infer(context.Background(), c, req)
			require.Equal(t, connect.CodeResourceExhausted, codeOf(err), "%v", err)
			small := clone(req)
			small.Inputs[0].Shape = []int64{1024}
			small.RawInputContents[0] = make([]byte, 4096)
			_, err = infer(context.Background(), c, small)
			require.NoError(t, err)
		})
	}
}

// TestPooledInputBuffersNotReusedEarly: large requests are read into pooled buffers that identity
// outputs alias. Many concurrent calls with distinct tensors, on connections of their own and on
// one shared connection, each get exactly their own tensor back: no buffer goes back to the pool
// while a response still reads from it.
func TestPooledInputBuffersNotReusedEarly(t *testing.T) {
	srv := start(t, rawEcho{})
	// Small flow-control windows keep each response on the wire for many round trips, so the
	// server receives other requests while it is still sending from a buffer.
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30)))
	require.NoError(t, err)
	defer conn.Close()
	const n = 1 << 20 // 4 MiB of FP32: above the pool's 1 MiB floor
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5 {
				in := make([]float32, n)
				for j := range in {
					in[j] = float32(w*1000 + i*10 + j%7)
				}
				req := &inference.ModelInferRequest{ModelName: "raw_echo",
					Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("IN", "FP32", []int64{n})},
					RawInputContents: [][]byte{tensor.Bytes(in)},
				}
				res := new(inference.ModelInferResponse)
				if err := conn.Invoke(context.Background(), servicePath+"ModelInfer", req, res); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(req.RawInputContents[0], res.RawOutputContents[0]) {
					t.Errorf("worker %d call %d: the response is not the request's tensor", w, i)
					return
				}
			}
		})
	}
	wg.Wait()
}

// rawEcho answers with its input's bytes themselves, so its output aliases the request buffer
// whatever the tensor's alignment in the message.
type rawEcho struct{}

func (rawEcho) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "raw_echo", Platform: "test",
		Input:  []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}}}
}

func (rawEcho) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("IN")
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: in.Datatype, Shape: in.Shape, Data: in.Data}}})
}
