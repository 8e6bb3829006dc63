package app

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// access is who may call a route or RPC.
type access int

const (
	open    access = iota // anyone, no key: health, metrics, reflection
	anyKey                // any valid key
	scoped                // any valid key, for the models it may use; others look unknown
	control               // a key with the control permission (or admin), for its models
	admin                 // an admin key
)

// rpcAccess is the authorization model of every RPC served. An RPC missing here fails the test:
// a new RPC must be placed in the model before it ships.
var rpcAccess = map[string]access{
	"ServerLive": anyKey, "ServerReady": anyKey, "ServerMetadata": anyKey, "RepositoryIndex": anyKey,
	"ModelReady": scoped, "ModelMetadata": scoped, "ModelInfer": scoped, "ModelStreamInfer": scoped,
	"ModelConfig": scoped, "ModelStatistics": scoped,
	"RepositoryModelLoad": control, "RepositoryModelUnload": control, "TraceSetting": control, "LogSettings": control,
	"SystemSharedMemoryStatus": anyKey, "SystemSharedMemoryRegister": anyKey, "SystemSharedMemoryUnregister": anyKey,
	"CudaSharedMemoryStatus": anyKey, "CudaSharedMemoryRegister": anyKey, "CudaSharedMemoryUnregister": anyKey,
	"ListModels": anyKey, "CreateChatCompletion": scoped, "StreamChatCompletion": scoped, "CreateCompletion": scoped,
	"StreamCompletion": scoped, "CreateEmbedding": scoped, "Tokenize": scoped, "Detokenize": scoped,
	"CreateResponse": scoped, "StreamResponse": scoped, "GetResponse": anyKey, "DeleteResponse": anyKey, "ListInputItems": anyKey,
	"Register": admin, "Heartbeat": admin, "Deregister": admin, "ListBackends": admin,
}

// principal is one caller of the matrix.
type principal struct {
	name, key string
	valid     bool
	admin     bool
	control   bool
}

var principals = []principal{
	{name: "no key"},
	{name: "wrong key", key: "sk-not-a-key-0000"},
	{name: "model-scoped key", key: secUserKey, valid: true},
	{name: "control key", key: secControlKey, valid: true, control: true},
	{name: "admin key", key: secAdminKey, valid: true, admin: true, control: true},
}

// outcome is what a caller sees of one call, whatever the transport: the code (connect's names,
// "ok" for success), the error message, and the answer's body.
type outcome struct{ code, msg, body string }

func (o outcome) hideName(name string) outcome {
	return outcome{o.code, strings.ReplaceAll(o.msg, name, "<MODEL>"), strings.ReplaceAll(o.body, name, "<MODEL>")}
}

// transports call one RPC with a request message and an API key.
type rpcCaller func(t *testing.T, method protoreflect.MethodDescriptor, req proto.Message, key string) outcome

// Every RPC of every service, over native gRPC, Connect and gRPC-Web, with no key, a wrong key,
// a model-scoped key, a control key and an admin key: who may call what is the README's security
// model, and a model a key may not use is, to that key, indistinguishable from one that does not
// exist. Before, any key could load and unload any model, and model-scoped keys could read the
// metadata, config and statistics of every model.
func TestSecurityAuthMatrixRPC(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "llama", "qwen")
	addr := startInProcess(t, secureConfig(t, up.URL, ""))
	conn := dial(t, addr)
	transports := map[string]rpcCaller{
		"gRPC":     grpcCaller(conn),
		"Connect":  connectCaller("http://" + addr),
		"gRPC-Web": grpcWebCaller("http://" + addr),
	}
	services := []grpc.ServiceDesc{inference.GRPCInferenceService_ServiceDesc, openaiv1.OpenAIService_ServiceDesc,
		registryv1.RegistryService_ServiceDesc}
	// The model a scoped key may use, one it may not, and one nobody has, per service.
	models := map[string][3]string{
		"inference.GRPCInferenceService":    {"simple", "simple_int8", "no_such_model"},
		"infergate.openai.v1.OpenAIService": {"llama", "qwen", "no_such_model"},
	}
	for _, sd := range services {
		svc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		require.NoError(t, err)
		methods := svc.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			acc, ok := rpcAccess[string(m.Name())]
			require.True(t, ok, "RPC %s is not in the authorization model (rpcAccess)", m.FullName())
			for tname, call := range transports {
				t.Run(tname+"/"+string(m.Name()), func(t *testing.T) {
					ms := models[sd.ServiceName]
					req := func(model string) proto.Message { r, _ := requestFor(t, m, model); return r }
					_, named := requestFor(t, m, "")
					unknown := call(t, m, req(ms[2]), secAdminKey).hideName(ms[2])
					for _, p := range principals {
						visible := call(t, m, req(ms[0]), p.key)
						reload(t, conn, m, ms[0])
						expectAccess(t, p, acc, visible, unknown, ms[0], named)
						if named && p.valid && !p.admin && (acc == scoped || (acc == control && p.control)) {
							hidden := call(t, m, req(ms[1]), p.key).hideName(ms[1])
							reload(t, conn, m, ms[1])
							assert.Equal(t, unknown, hidden, "%s: a model the key may not use answers as an unknown one", p.name)
						}
					}
				})
			}
		}
	}
}

// expectAccess checks what principal p saw calling an RPC of access acc on a model it may use.
func expectAccess(t *testing.T, p principal, acc access, got, unknown outcome, model string, named bool) {
	t.Helper()
	switch {
	case acc == open:
		assert.NotEqual(t, "unauthenticated", got.code, p.name)
	case !p.valid:
		assert.Equal(t, "unauthenticated", got.code, "%s: %+v", p.name, got)
	case acc == admin && !p.admin, acc == control && !p.control:
		assert.Equal(t, "permission_denied", got.code, "%s: %+v", p.name, got)
	default:
		assert.NotContains(t, []string{"unauthenticated", "permission_denied"}, got.code, "%s: %+v", p.name, got)
		// Where an unknown model's answer names it, the model the key may use must answer
		// otherwise (calls that fail the same for every model, unimplemented ones, prove nothing).
		if named && (acc == scoped || acc == control) && strings.Contains(unknown.msg+unknown.body, "<MODEL>") {
			assert.NotEqual(t, unknown, got.hideName(model), "%s sees the model it may use", p.name)
		}
	}
}

// openAIRequests are valid requests of the OpenAI service's methods, so that what a call of a
// model the key may use answers (a completion) differs from an unknown model's.
var openAIRequests = map[string]string{
	"CreateChatCompletion": `{"model":"$M","messages":[{"role":"user","content":"hi"}]}`,
	"StreamChatCompletion": `{"request":{"model":"$M","messages":[{"role":"user","content":"hi"}]}}`,
	"CreateCompletion":     `{"model":"$M","prompt":["hi"]}`,
	"StreamCompletion":     `{"request":{"model":"$M","prompt":["hi"]}}`,
	"CreateEmbedding":      `{"model":"$M","input":["hi"]}`,
	// No model has a tokenizer here: the upstream, a fake vLLM, answers them.
	"Tokenize":       `{"model":"$M","prompt":"hi"}`,
	"Detokenize":     `{"model":"$M","tokens":[104,105]}`,
	"CreateResponse": `{"model":"$M","input":"hi"}`,
	"StreamResponse": `{"request":{"model":"$M","input":"hi"}}`,
	"GetResponse":    `{"response_id":"resp_0000"}`,
	"DeleteResponse": `{"response_id":"resp_0000"}`,
	"ListInputItems": `{"response_id":"resp_0000"}`,
}

// requestFor is a request of m's input type naming model, and whether the type names a model at
// all: the OpenAI service's from openAIRequests, others empty but for their model field.
func requestFor(t *testing.T, m protoreflect.MethodDescriptor, model string) (proto.Message, bool) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Input().FullName())
	require.NoError(t, err)
	msg := mt.New()
	if tmpl, ok := openAIRequests[string(m.Name())]; ok {
		require.NoError(t, protojson.Unmarshal([]byte(strings.ReplaceAll(tmpl, "$M", model)), msg.Interface()))
		return msg.Interface(), true
	}
	for _, name := range []protoreflect.Name{"name", "model_name", "model"} {
		if f := msg.Descriptor().Fields().ByName(name); f != nil && f.Kind() == protoreflect.StringKind {
			msg.Set(f, protoreflect.ValueOfString(model))
			return msg.Interface(), true
		}
	}
	return msg.Interface(), false
}

// reload loads again a model an unload in the matrix took away, so later calls find it.
func reload(t *testing.T, conn *grpc.ClientConn, m protoreflect.MethodDescriptor, model string) {
	if m.Name() != "RepositoryModelUnload" {
		return
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secAdminKey)
	_, _ = inference.NewGRPCInferenceServiceClient(conn).RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: model})
}

func procedure(m protoreflect.MethodDescriptor) string {
	return "/" + string(m.Parent().FullName()) + "/" + string(m.Name())
}

func newOutput(t *testing.T, m protoreflect.MethodDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(m.Output().FullName())
	require.NoError(t, err)
	return mt.New().Interface()
}

func grpcCaller(conn *grpc.ClientConn) rpcCaller {
	return func(t *testing.T, m protoreflect.MethodDescriptor, req proto.Message, key string) outcome {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
		}
		var bodies []string
		var err error
		if !m.IsStreamingClient() && !m.IsStreamingServer() {
			res := newOutput(t, m)
			if err = conn.Invoke(ctx, procedure(m), req, res); err == nil {
				bodies = append(bodies, protojson.Format(res))
			}
		} else {
			var s grpc.ClientStream
			s, err = conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, procedure(m))
			if err == nil {
				_ = s.SendMsg(req)
				_ = s.CloseSend()
				for {
					res := newOutput(t, m)
					if err = s.RecvMsg(res); err != nil {
						break
					}
					bodies = append(bodies, protojson.Format(res))
				}
				if err == io.EOF {
					err = nil
				}
			}
		}
		st := status.Convert(err)
		code := "ok"
		if err != nil {
			code = connect.Code(st.Code()).String()
		}
		return outcome{code, st.Message(), strings.Join(bodies, "\n")}
	}
}

// connectCaller calls over Connect with JSON: unary calls as plain POSTs, streams enveloped.
func connectCaller(base string) rpcCaller {
	return func(t *testing.T, m protoreflect.MethodDescriptor, req proto.Message, key string) outcome {
		body, err := protojson.Marshal(req)
		require.NoError(t, err)
		hdr := []string{"Connect-Protocol-Version", "1", "Authorization", "Bearer " + key}
		if !m.IsStreamingClient() && !m.IsStreamingServer() {
			r := send(t, h2c(), http.MethodPost, base+procedure(m), body, append(hdr, "Content-Type", "application/json")...)
			if r.status == http.StatusOK {
				return outcome{"ok", "", normJSON(t, m, []byte(r.body))}
			}
			var e struct{ Code, Message string }
			_ = json.Unmarshal([]byte(r.body), &e)
			return outcome{e.Code, e.Message, ""}
		}
		r := send(t, h2c(), http.MethodPost, base+procedure(m), frame(0, body), append(hdr, "Content-Type", "application/connect+json")...)
		var bodies []string
		o := outcome{code: "ok"}
		if r.status != http.StatusOK { // refused before the stream began: a unary-style error
			var e struct{ Code, Message string }
			_ = json.Unmarshal([]byte(r.body), &e)
			return outcome{e.Code, e.Message, ""}
		}
		for _, f := range frames([]byte(r.body)) {
			if f.flags&0x02 != 0 {
				var end struct {
					Error *struct{ Code, Message string }
				}
				_ = json.Unmarshal(f.data, &end)
				if end.Error != nil {
					o.code, o.msg = end.Error.Code, end.Error.Message
				}
				continue
			}
			bodies = append(bodies, normJSON(t, m, f.data))
		}
		o.body = strings.Join(bodies, "\n")
		return o
	}
}

// grpcWebCaller calls over gRPC-Web with binary messages.
func grpcWebCaller(base string) rpcCaller {
	return func(t *testing.T, m protoreflect.MethodDescriptor, req proto.Message, key string) outcome {
		body, err := proto.Marshal(req)
		require.NoError(t, err)
		r := send(t, h2c(), http.MethodPost, base+procedure(m), frame(0, body),
			"Content-Type", "application/grpc-web+proto", "X-Grpc-Web", "1", "Authorization", "Bearer "+key)
		var bodies []string
		trailer := r.header
		for _, f := range frames([]byte(r.body)) {
			if f.flags&0x80 != 0 {
				trailer = http.Header{}
				for _, line := range strings.Split(strings.TrimSpace(string(f.data)), "\r\n") {
					k, v, _ := strings.Cut(line, ":")
					trailer.Set(strings.TrimSpace(k), strings.TrimSpace(v))
				}
				continue
			}
			res := newOutput(t, m)
			require.NoError(t, proto.Unmarshal(f.data, res))
			bodies = append(bodies, protojson.Format(res))
		}
		n, _ := strconv.Atoi(trailer.Get("Grpc-Status"))
		code := "ok"
		if n != 0 {
			code = connect.Code(n).String()
		}
		msg, _ := url.PathUnescape(trailer.Get("Grpc-Message"))
		return outcome{code, msg, strings.Join(bodies, "\n")}
	}
}

// normJSON renders a JSON answer as protojson.Format does, so the transports compare alike.
func normJSON(t *testing.T, m protoreflect.MethodDescriptor, b []byte) string {
	res := newOutput(t, m)
	require.NoError(t, protojson.Unmarshal(b, res), "%s", b)
	return protojson.Format(res)
}

type envFrame struct {
	flags byte
	data  []byte
}

func frames(b []byte) []envFrame {
	var out []envFrame
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			break
		}
		out = append(out, envFrame{b[0], b[5 : 5+n]})
		b = b[5+n:]
	}
	return out
}

// What listings show a model-scoped key: only its models, on every surface.
func TestSecurityListingsShowOnlyAKeysModels(t *testing.T) {
	up := openaitest.Start(t, "up", "llama", "qwen")
	addr := startInProcess(t, secureConfig(t, up.URL, ""))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secUserKey)
	c := inference.NewGRPCInferenceServiceClient(dial(t, addr))
	idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	var names []string
	for _, m := range idx.GetModels() {
		names = append(names, m.GetName())
	}
	slices.Sort(names)
	assert.Equal(t, []string{"llama", "simple"}, names, "RepositoryIndex")
	stats, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{})
	require.NoError(t, err)
	names = nil
	for _, s := range stats.GetModelStats() {
		names = append(names, s.GetName())
	}
	slices.Sort(names)
	assert.Equal(t, []string{"llama", "simple"}, names, "ModelStatistics")

	_, body := getWithKey(t, addr, "/v1/models", secUserKey)
	assert.Contains(t, body, `"llama"`)
	assert.NotContains(t, body, `"qwen"`, "/v1/models")
	_, body = getWithKey(t, addr, "/v2/models/stats", secUserKey)
	assert.Contains(t, body, `"simple"`)
	assert.NotContains(t, body, `"simple_int8"`, "/v2/models/stats")
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v2/repository/index", nil, "Authorization", "Bearer "+secUserKey)
	assert.Equal(t, http.StatusOK, r.status)
	assert.NotContains(t, r.body, "simple_int8", "/v2/repository/index")
	list, err := openaiv1.NewOpenAIServiceClient(dial(t, addr)).ListModels(ctx, &openaiv1.ListModelsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetData(), 1)
	assert.Equal(t, "llama", list.GetData()[0].GetId(), "ListModels")
	_, body = getWithKey(t, addr, "/v1/models", secAdminKey)
	assert.Contains(t, body, `"qwen"`, "an admin key sees every model")
}

// httpOutcome is what a caller sees of an HTTP route: its status and body.
type httpOutcome struct {
	status int
	body   string
}

// Every HTTP route (KServe REST, the OpenAI API, files and batches, admin, health and metrics) with
// every kind of caller, as TestSecurityAuthMatrixRPC does for RPCs.
var requestIDField = regexp.MustCompile(`"request_id":"[^"]*"`)

func TestSecurityAuthMatrixHTTP(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "llama", "qwen")
	// llama and qwen have a tokenizer, so /tokenize answers the key that may use the model.
	// ... and sessions and a response cache, so that their routes are there.
	addr := startInProcess(t, secureConfig(t, up.URL, fmt.Sprintf("models:\n  llama: {tokenizer: %[1]s, session: {}, cache: {}}\n  qwen: {tokenizer: %[1]s, session: {}}\n", qwenTokenizer(t))))
	base := "http://" + addr
	kserve := [3]string{"simple", "simple_int8", "no_such_model"}
	llm := [3]string{"llama", "qwen", "no_such_model"}
	routes := []struct {
		method, path, body string
		acc                access
		models             *[3]string // the route names a model ($M): visible, hidden, unknown
	}{
		{"GET", "/metrics", "", open, nil},
		{"GET", "/health", "", open, nil},
		{"GET", "/v2/health/live", "", open, nil},
		{"GET", "/v2/health/ready", "", open, nil},
		{"GET", "/v2", "", anyKey, nil},
		{"GET", "/v2/models/stats", "", anyKey, nil},
		{"POST", "/v2/repository/index", "", anyKey, nil},
		{"GET", "/v1/models", "", anyKey, nil},
		{"GET", "/v1/files", "", anyKey, nil},
		{"GET", "/v1/batches", "", anyKey, nil},
		{"GET", "/v2/models/$M", "", scoped, &kserve},
		{"GET", "/v2/models/$M/versions/1", "", scoped, &kserve},
		{"GET", "/v2/models/$M/ready", "", scoped, &kserve},
		{"GET", "/v2/models/$M/config", "", scoped, &kserve},
		{"GET", "/v2/models/$M/stats", "", scoped, &kserve},
		{"POST", "/v2/models/$M/infer", `{"inputs":[]}`, scoped, &kserve},
		{"POST", "/v2/models/$M/generate", `{"text_input":"hi"}`, scoped, &kserve},
		{"POST", "/v2/models/$M/generate_stream", `{"text_input":"hi"}`, scoped, &kserve},
		{"POST", "/v2/repository/models/$M/load", "", control, &kserve},
		{"POST", "/v2/repository/models/$M/unload", "", control, &kserve},
		{"GET", "/v1/models/$M", "", scoped, &llm},
		{"POST", "/v1/chat/completions", `{"model":"$M","messages":[{"role":"user","content":"hi"}]}`, scoped, &llm},
		{"POST", "/v1/completions", `{"model":"$M","prompt":"hi"}`, scoped, &llm},
		{"POST", "/v1/embeddings", `{"model":"$M","input":"hi"}`, scoped, &llm},
		{"POST", "/v1/rerank", `{"model":"$M","query":"q","documents":["a"]}`, scoped, &llm},
		{"POST", "/classify", `{"model":"$M","input":"hi"}`, scoped, &llm},
		{"POST", "/v1/audio/transcriptions", "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n$M\r\n--b--\r\n", scoped, &llm},
		{"POST", "/tokenize", `{"model":"$M","prompt":"hi"}`, scoped, &llm},
		{"POST", "/detokenize", `{"model":"$M","tokens":[9707]}`, scoped, &llm},
		{"GET", "/admin/guard", "", admin, nil},
		{"DELETE", "/admin/cache", "", admin, nil},
		{"POST", "/v1/sessions", `{"model":"$M"}`, scoped, &llm},
		{"GET", "/v1/sessions/sess_AAAAAAAAAAAAAAAAAAAAAA", "", anyKey, nil},
		{"DELETE", "/v1/sessions/sess_AAAAAAAAAAAAAAAAAAAAAA", "", anyKey, nil},
		{"POST", "/v1/responses", `{"model":"$M","input":"hi"}`, scoped, &llm},
		{"GET", "/v1/responses/resp_0000", "", anyKey, nil},
		{"DELETE", "/v1/responses/resp_0000", "", anyKey, nil},
		{"GET", "/v1/responses/resp_0000/input_items", "", anyKey, nil},
		{"POST", "/v1/responses/resp_0000/cancel", "", anyKey, nil},
		{"POST", "/v1/messages", `{"model":"$M","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, scoped, &llm},
		{"POST", "/v1/messages/count_tokens", `{"model":"$M","messages":[{"role":"user","content":"hi"}]}`, scoped, &llm},
		{"POST", "/olla/anthropic/v1/messages", `{"model":"$M","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, scoped, &llm},
		{"GET", "/olla/models", "", anyKey, nil},
		{"GET", "/olla/vllm/v1/models/$M", "", scoped, &llm},
		{"POST", "/olla/vllm/v1/chat/completions", `{"model":"$M","messages":[{"role":"user","content":"hi"}]}`, scoped, &llm},
		{"POST", "/olla/proxy/v1/completions", `{"model":"$M","prompt":"hi"}`, scoped, &llm},
		{"GET", "/olla/vllm/health", "", anyKey, nil},
		{"GET", "/olla/vllm/metrics", "", anyKey, nil},
		{"GET", "/internal/health", "", open, nil},
		{"GET", "/version", "", open, nil},
		{"GET", "/internal/status", "", admin, nil},
		{"GET", "/internal/status/endpoints", "", admin, nil},
		{"GET", "/internal/status/models", "", admin, nil},
		{"GET", "/internal/stats/models", "", admin, nil},
		{"GET", "/internal/stats/translators", "", admin, nil},
		{"GET", "/internal/stats/sticky", "", admin, nil},
		{"GET", "/internal/process", "", admin, nil},
		{"GET", "/v2/systemsharedmemory/status", "", anyKey, nil},
		{"GET", "/v2/systemsharedmemory/region/nope/status", "", anyKey, nil},
		{"POST", "/v2/systemsharedmemory/region/nope/register", `{"key":"../not/a/key","offset":0,"byte_size":16}`, anyKey, nil},
		{"POST", "/v2/systemsharedmemory/region/nope/unregister", "", anyKey, nil},
		{"GET", "/v2/cudasharedmemory/status", "", anyKey, nil},
		{"GET", "/v2/trace/setting", "", control, nil},
		{"POST", "/v2/trace/setting", `{"trace_rate":"1000"}`, control, nil},
		{"GET", "/v2/models/$M/trace/setting", "", control, &kserve},
		{"GET", "/v2/logging", "", control, nil},
		{"POST", "/v2/logging", `{"log_info":true}`, control, nil},
	}
	call := func(method, path, body, key, model string) httpOutcome {
		fill := func(s string) string { return strings.ReplaceAll(s, "$M", model) }
		var hdr []string
		if key != "" {
			hdr = []string{"Authorization", "Bearer " + key}
		}
		ct := "application/json"
		if strings.HasPrefix(path, "/v1/audio/") {
			ct = "multipart/form-data; boundary=b"
		}
		r := send(t, http.DefaultClient, method, base+fill(path), []byte(fill(body)), append(hdr, "Content-Type", ct)...)
		if strings.HasSuffix(path, "/unload") && r.status == http.StatusOK {
			send(t, http.DefaultClient, http.MethodPost, base+strings.Replace(fill(path), "/unload", "/load", 1), nil, "Authorization", "Bearer "+secAdminKey)
		}
		assert.Less(t, r.status, 500, "%s %s: %s", method, fill(path), r.body)
		if model != "" {
			r.body = strings.ReplaceAll(r.body, model, "<MODEL>")
		}
		r.body = requestIDField.ReplaceAllString(r.body, `"request_id":"<ID>"`) // Anthropic's errors name the request
		return httpOutcome{r.status, r.body}
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			var ms [3]string
			if rt.models != nil {
				ms = *rt.models
			}
			unknown := call(rt.method, rt.path, rt.body, secAdminKey, ms[2])
			for _, p := range principals {
				got := call(rt.method, rt.path, rt.body, p.key, ms[0])
				switch {
				case rt.acc == open:
					assert.NotEqual(t, http.StatusUnauthorized, got.status, p.name)
				case !p.valid:
					assert.Equal(t, http.StatusUnauthorized, got.status, "%s: %s", p.name, got.body)
				case rt.acc == admin && !p.admin, rt.acc == control && !p.control:
					assert.Equal(t, http.StatusForbidden, got.status, "%s: %s", p.name, got.body)
				default:
					assert.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, got.status, "%s: %s", p.name, got.body)
					if rt.models != nil && strings.Contains(unknown.body, "<MODEL>") {
						assert.NotEqual(t, unknown, got, "%s sees the model it may use", p.name)
					}
				}
				if rt.models != nil && p.valid && !p.admin && (rt.acc == scoped || (rt.acc == control && p.control)) {
					hidden := call(rt.method, rt.path, rt.body, p.key, ms[1])
					assert.Equal(t, unknown, hidden, "%s: a model the key may not use answers as an unknown one", p.name)
				}
			}
		})
	}
}
