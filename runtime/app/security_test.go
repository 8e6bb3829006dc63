package app

// The security regression suite (issue 17): what an attacker can make the gateway spend or reveal,
// tried against the gateway as the binary builds it (build, in process, so the heap can be
// measured), on every surface. Each case names the defect it guards against.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/metadata"
)

const (
	secUserKey    = "sk-sec-user-2f4c8a1b9e"    // models: [simple, llama]
	secControlKey = "sk-sec-control-7a3d5e9c1f" // models: [simple, llama], control
	secAdminKey   = "sk-sec-admin-0c6b2e8d4a"
)

// secureConfig is a gateway with API keys, a fake vLLM upstream serving llama and qwen, the
// built-in models and the batch API.
func secureConfig(t *testing.T, upstream string, extra string) string {
	return fmt.Sprintf(`
upstreams:
  - {name: up, url: %s, type: vllm}
auth:
  keys:
    - {name: user, sha256: %s, models: [simple, llama]}
    - {name: ctl, sha256: %s, models: [simple, llama], control: true}
    - {name: ops, sha256: %s, admin: true}
batch:
  dir: %s
%s`, upstream, guard.HashKey(secUserKey), guard.HashKey(secControlKey), guard.HashKey(secAdminKey), t.TempDir(), extra)
}

// startInProcess builds the gateway from a YAML document as the binary does and serves it on a
// free port until the test ends.
func startInProcess(t *testing.T, yaml string) string {
	t.Helper()
	return startLogged(t, yaml, io.Discard)
}

// startLogged is startInProcess, logging to logs.
func startLogged(t *testing.T, yaml string, logs io.Writer) string {
	t.Helper()
	addr := serveYAML(t, yaml, logs)
	require.Eventually(t, func() bool {
		code, _ := getWithKey(t, addr, "/v1/models/llama", secAdminKey)
		return code == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "the upstream's models are routed")
	return addr
}

// serveYAML builds the gateway from a YAML document as the binary does and serves it on a free
// port until the test ends.
func serveYAML(t testing.TB, yaml string, logs io.Writer) string {
	t.Helper()
	addr, _, _ := startYAML(t, yaml, logs)
	return addr
}

// startYAML is serveYAML that also returns the level the gateway logs at (a LevelVar, as main's:
// Triton's logging extension changes it) and stop, which drains the gateway and closes what it
// built (flushing spans, say) before the test ends; it runs at the end if not called before.
func startYAML(t testing.TB, yaml string, logs io.Writer) (addr string, lv *slog.LevelVar, stop func()) {
	t.Helper()
	cfg, err := ParseConfig("test", []byte(yaml))
	require.NoError(t, err)
	lv = new(slog.LevelVar)
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: lv}))
	a, err := Build(cfg, RoleGateway, gateway.Config{Logger: log, DrainTimeout: time.Second, LogLevel: lv})
	require.NoError(t, err)
	gw := a.Gateway
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Serve(ln) }()
	stop = sync.OnceFunc(func() {
		_ = gw.Shutdown(context.Background())
		<-done
		a.Close()
	})
	t.Cleanup(stop)
	return ln.Addr().String(), lv, stop
}

// h2c is an HTTP/2 cleartext client: how gRPC clients reach the gateway.
func h2c() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
}

// allocated is the bytes the process has allocated on the heap since it started.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// bombProto is a gzip-compressed ModelInferRequest for model whose one raw input is n zero bytes:
// a few hundred KiB that inflate to n, built without holding n bytes.
func bombProto(t *testing.T, model string, n int) []byte {
	var head []byte
	head = append(head, 0x0a, byte(len(model)))
	head = append(head, model...)
	head = append(head, 0x3a) // raw_input_contents, field 7, bytes
	head = binary.AppendUvarint(head, uint64(n))
	return gzipStream(t, head, n)
}

// gzipStream compresses head followed by n zero bytes: one gzip member per MiB, the same member
// repeated (a multi-member stream is one gzip body, as gzip -d reads it), so a bomb of any size
// costs one MiB of compressing.
func gzipStream(t *testing.T, head []byte, n int) []byte {
	member := func(data []byte) []byte {
		var b bytes.Buffer
		zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
		require.NoError(t, err)
		_, _ = zw.Write(data)
		require.NoError(t, zw.Close())
		return b.Bytes()
	}
	const mib = 1 << 20
	out := member(append(head, make([]byte, n%mib)...))
	return append(out, bytes.Repeat(member(make([]byte, mib)), n/mib)...)
}

func frame(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

type secResponse struct {
	status  int
	header  http.Header
	body    string
	trailer http.Header
}

// code is the gRPC status of a gRPC or gRPC-Web answer (trailers, trailers-only headers, or the
// trailer frame of a gRPC-Web body).
func (r secResponse) grpcStatus() string {
	for _, h := range []http.Header{r.trailer, r.header} {
		if v := h.Get("Grpc-Status"); v != "" {
			return v
		}
	}
	if i := strings.Index(r.body, "grpc-status:"); i >= 0 {
		return strings.TrimSpace(strings.SplitN(r.body[i+len("grpc-status:"):], "\r\n", 2)[0])
	}
	return ""
}

func send(t *testing.T, c *http.Client, method, url string, body []byte, header ...string) secResponse {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return secResponse{status: res.StatusCode, header: res.Header, body: string(b), trailer: res.Trailer}
}

// A 128 MiB decompression bomb (a few hundred KiB of gzip) sent to every surface is refused while
// it inflates: the answer is the protocol's RESOURCE_EXHAUSTED / 413, and the gateway allocates a
// small part of what it would inflate to. Before, each surface inflated the whole body (1 GiB
// bombs cost 2.5 to 8.5 GB of RSS), and native gRPC did so before checking the API key.
func TestSecurityDecompressionBombs(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, secureConfig(t, up.URL, ""))
	base := "http://" + addr
	const inflated = 128 << 20
	bomb := bombProto(t, "simple", inflated)
	jsonBomb := gzipStream(t, []byte(`{"inputs":[{"name":"INPUT0","datatype":"BYTES","shape":[1],"data":["`), inflated)
	auth := "Bearer " + secUserKey
	cases := []struct {
		name  string
		c     *http.Client
		path  string
		body  []byte
		hdr   []string
		check func(t *testing.T, r secResponse)
	}{
		{"KServe REST", http.DefaultClient, "/v2/models/simple/infer", jsonBomb,
			[]string{"Content-Encoding", "gzip", "Content-Type", "application/json"},
			func(t *testing.T, r secResponse) {
				assert.Equal(t, http.StatusRequestEntityTooLarge, r.status)
				assert.Contains(t, r.body, "max_decompression_ratio")
			}},
		{"Connect unary", http.DefaultClient, "/inference.GRPCInferenceService/ModelInfer", bomb,
			[]string{"Content-Encoding", "gzip", "Content-Type", "application/proto", "Connect-Protocol-Version", "1"},
			func(t *testing.T, r secResponse) {
				assert.Equal(t, http.StatusTooManyRequests, r.status, "Connect's resource_exhausted: %s", r.body)
				assert.Contains(t, r.body, `"code":"resource_exhausted"`)
			}},
		{"Connect stream", h2c(), "/inference.GRPCInferenceService/ModelStreamInfer", frame(1, bomb),
			[]string{"Connect-Content-Encoding", "gzip", "Content-Type", "application/connect+proto", "Connect-Protocol-Version", "1"},
			func(t *testing.T, r secResponse) { assert.Contains(t, r.body, `"code":"resource_exhausted"`) }},
		{"gRPC-Web", http.DefaultClient, "/inference.GRPCInferenceService/ModelInfer", frame(1, bomb),
			[]string{"Grpc-Encoding", "gzip", "Content-Type", "application/grpc-web+proto"},
			func(t *testing.T, r secResponse) { assert.Equal(t, "8", r.grpcStatus(), "RESOURCE_EXHAUSTED") }},
		{"native gRPC unary", h2c(), "/inference.GRPCInferenceService/ModelInfer", frame(1, bomb),
			[]string{"Grpc-Encoding", "gzip", "Content-Type", "application/grpc", "Te", "trailers"},
			func(t *testing.T, r secResponse) {
				assert.Equal(t, "8", r.grpcStatus(), "RESOURCE_EXHAUSTED %v %v", r.trailer, r.header)
				assert.Contains(t, r.trailer.Get("Grpc-Message")+r.header.Get("Grpc-Message"), "max_decompression_ratio")
			}},
		{"native gRPC stream", h2c(), "/inference.GRPCInferenceService/ModelStreamInfer", frame(1, bomb),
			[]string{"Grpc-Encoding", "gzip", "Content-Type", "application/grpc", "Te", "trailers"},
			func(t *testing.T, r secResponse) { assert.Equal(t, "8", r.grpcStatus(), "RESOURCE_EXHAUSTED") }},
		// Media types are case-insensitive: connect-go and the router read them so, and so must
		// the bounds (a capitalised Application/grpc goes to net/http's server, not grpc-go's).
		{"gRPC-Web, capitalised", http.DefaultClient, "/inference.GRPCInferenceService/ModelInfer", frame(1, bomb),
			[]string{"Grpc-Encoding", "gzip", "Content-Type", "Application/gRPC-Web+proto"},
			func(t *testing.T, r secResponse) { assert.Equal(t, "8", r.grpcStatus(), "RESOURCE_EXHAUSTED") }},
		{"gRPC over net/http, capitalised", h2c(), "/inference.GRPCInferenceService/ModelInfer", frame(1, bomb),
			[]string{"Grpc-Encoding", "gzip", "Content-Type", "Application/grpc", "Te", "trailers"},
			func(t *testing.T, r secResponse) { assert.Equal(t, "8", r.grpcStatus(), "RESOURCE_EXHAUSTED") }},
		{"Connect stream, capitalised", h2c(), "/inference.GRPCInferenceService/ModelStreamInfer", frame(1, bomb),
			[]string{"Connect-Content-Encoding", "gzip", "Content-Type", "Application/Connect+proto", "Connect-Protocol-Version", "1"},
			func(t *testing.T, r secResponse) { assert.Contains(t, r.body, `"code":"resource_exhausted"`) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := allocated()
			r := send(t, tc.c, http.MethodPost, base+tc.path, tc.body, append(tc.hdr, "Authorization", auth)...)
			spent := allocated() - before
			tc.check(t, r)
			assert.Less(t, spent, uint64(24<<20), "the gateway allocated %d MiB for a %d MiB bomb", spent>>20, inflated>>20)
		})
	}
	// Without a key, native gRPC refuses the call from its headers: nothing is read or inflated.
	before := allocated()
	r := send(t, h2c(), http.MethodPost, base+"/inference.GRPCInferenceService/ModelInfer", frame(1, bomb),
		"Grpc-Encoding", "gzip", "Content-Type", "application/grpc", "Te", "trailers")
	assert.Equal(t, "16", r.grpcStatus(), "UNAUTHENTICATED")
	assert.Less(t, allocated()-before, uint64(4<<20))
}

// Malformed input an attacker controls: deeply nested JSON, oversized headers, traversal in ids
// and model names. Each gets a clear 4xx in its protocol's shape; none a 5xx, none a crash, and
// the gateway serves normally afterwards.
func TestSecurityBadInput(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	cfg := secureConfig(t, up.URL, "")
	addr := startInProcess(t, cfg)
	base := "http://" + addr
	auth := []string{"Authorization", "Bearer " + secAdminKey, "Content-Type", "application/json"}
	deep := strings.Repeat("[", 100000)
	for _, tc := range []struct{ name, path, body string }{
		{"REST infer", "/v2/models/simple/infer", `{"inputs":` + deep},
		{"REST repository index", "/v2/repository/index", `{"ready":` + deep},
		{"OpenAI chat", "/v1/chat/completions", `{"model":"llama","messages":` + deep},
		{"Connect JSON", "/inference.GRPCInferenceService/ModelInfer", `{"inputs":` + deep},
		{"batches", "/v1/batches", `{"input_file_id":` + deep},
	} {
		r := send(t, http.DefaultClient, http.MethodPost, base+tc.path, []byte(tc.body), append(auth, "Connect-Protocol-Version", "1")...)
		assert.True(t, r.status >= 400 && r.status < 500, "%s: deep JSON answers %d %s", tc.name, r.status, r.body)
	}

	// 2 MiB of headers: net/http's 431, and a refused gRPC call.
	big := strings.Repeat("x", 2<<20)
	r := send(t, http.DefaultClient, http.MethodGet, base+"/v2", nil, "Authorization", "Bearer "+secAdminKey, "X-Big", big)
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, r.status)
	conn := dial(t, addr)
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secAdminKey)
	_, err := c.ServerLive(ctx, &inference.ServerLiveRequest{}) // the connection is routed to gRPC
	require.NoError(t, err)
	_, err = c.ServerLive(metadata.AppendToOutgoingContext(ctx, "x-big", big), &inference.ServerLiveRequest{})
	assert.Error(t, err, "a 2 MiB header block is refused")
	live, err := c.ServerLive(ctx, &inference.ServerLiveRequest{})
	require.NoError(t, err, "and the gateway serves on")
	assert.True(t, live.GetLive())

	// Traversal: ids and model names are names, never paths. A file beside the batch directory
	// is never served.
	for _, path := range []string{
		"/v2/models/..%2F..%2Fetc%2Fpasswd", "/v2/models/..%2F..%2Fetc%2Fpasswd/infer",
		"/v1/files/..%2F..%2F..%2Fetc%2Fpasswd/content", "/v1/files/..%2Fsecret/content", "/v1/files/%2Fetc%2Fpasswd",
		"/v1/batches/..%2F..%2Fetc%2Fpasswd", "/v1/models/..%2F..%2Fetc%2Fpasswd",
		"/v2/repository/models/..%2F..%2Fetc%2Fpasswd/load",
	} {
		method := http.MethodGet
		if strings.HasSuffix(path, "/infer") || strings.HasSuffix(path, "/load") {
			method = http.MethodPost
		}
		r := send(t, http.DefaultClient, method, base+path, nil, auth...)
		assert.True(t, r.status >= 400 && r.status < 500, "%s %s: %d %s", method, path, r.status, r.body)
		assert.NotContains(t, r.body, "root:")
	}
	r = send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions",
		[]byte(`{"model":"../../etc/passwd","messages":[{"role":"user","content":"hi"}]}`), auth...)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Contains(t, r.body, "model_not_found")
}

// Headers a client sends cannot pass for the gateway's own: X-Forwarded-For gets the real peer
// appended, the gateway's API key never reaches the upstream, and the X-Infergate-* response
// headers name what really served the request.
func TestSecurityHeaderSpoofing(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, secureConfig(t, up.URL, ""))
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/chat/completions",
		[]byte(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`),
		"Authorization", "Bearer "+secUserKey, "Content-Type", "application/json",
		"X-Forwarded-For", "6.6.6.6", "X-Infergate-Endpoint", "evil", "X-Infergate-Model", "evil",
		"Connection", "X-Forwarded-For")
	require.Equal(t, http.StatusOK, r.status, r.body)
	got := up.LastHeader()
	assert.Empty(t, got.Get("Authorization"), "the gateway's key stays at the gateway")
	assert.Equal(t, "6.6.6.6, 127.0.0.1", got.Get("X-Forwarded-For"), "the real peer is appended, whatever the client claims")
	assert.Equal(t, "up", r.header.Get("X-Infergate-Endpoint"))
	assert.Equal(t, "llama", r.header.Get("X-Infergate-Model"))
}

// Connections that send nothing, or trickle, are closed after server.first_byte_timeout, not the
// idle timeout; and they do not keep other clients out.
func TestSecuritySlowloris(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, secureConfig(t, up.URL, "server: {first_byte_timeout: 500ms}"))
	closedWithin := func(c net.Conn, write func()) time.Duration {
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = io.Copy(io.Discard, c)
		}()
		if write != nil {
			write()
		}
		<-done
		return time.Since(start)
	}
	var conns []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	assert.Less(t, closedWithin(conns[0], nil), 10*time.Second, "a silent connection is closed")
	trickle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	elapsed := closedWithin(trickle, func() {
		for i := range len(clientPreface) {
			if _, err := trickle.Write([]byte{clientPreface[i]}); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	assert.Less(t, elapsed, 2*time.Second, "a trickled preface is closed at the first-byte bound")
	code, _ := getWithKey(t, addr, "/v2", secUserKey)
	assert.Equal(t, http.StatusOK, code, "50 silent connections keep no one out")
	for _, c := range conns {
		c.Close()
	}
}

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// With Redis gone (killed mid-run), every route that needs it answers within a bounded time with
// 503, Retry-After and its protocol's error, the logs say so once per interval rather than once
// per request, and everything works again once Redis is back. Before, batch reads hung until
// Redis returned (100 s seen), POST /v1/batches answered 500, and a fail-closed limiter logged a
// WARN line per refused request (4,848 in 8 s).
func TestSecurityRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	up := openaitest.Start(t, "up", "llama")
	logs := &logtest.Sink{}
	addr := startLogged(t, secureConfig(t, up.URL, fmt.Sprintf(`
redis: {addr: %s}
limits: {per_key: {requests_per_minute: 100000}, failure: closed}
`, rs.Addr)), logs)
	base := "http://" + addr
	key := []string{"Authorization", "Bearer " + secUserKey, "Content-Type", "application/json"}
	chatBody := []byte(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", chatBody, key...).status)
	fileID := uploadBatchFile(t, base, secUserKey, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"llama","messages":[]}}`+"\n")

	rs.Kill()
	bounded := func(name string, f func() secResponse) secResponse {
		t.Helper()
		start := time.Now()
		r := f()
		assert.Less(t, time.Since(start), 8*time.Second, "%s answers within a bound, not when Redis returns", name)
		assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", name, r.body)
		assert.NotEmpty(t, r.header.Get("Retry-After"), name)
		return r
	}
	for range 200 {
		r := bounded("chat", func() secResponse {
			return send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", chatBody, key...)
		})
		assert.Contains(t, r.body, `"code":"rate_limiter_unavailable"`)
	}
	for _, path := range []string{"/v1/batches", "/v1/batches/batch_0123456789abcdef"} {
		r := bounded("GET "+path, func() secResponse { return send(t, http.DefaultClient, http.MethodGet, base+path, nil, key...) })
		assert.Contains(t, r.body, `"error"`)
	}
	bounded("POST /v1/batches", func() secResponse {
		return send(t, http.DefaultClient, http.MethodPost, base+"/v1/batches",
			[]byte(`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`), key...)
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+secUserKey)
	_, err := inference.NewGRPCInferenceServiceClient(dial(t, addr)).ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "simple"})
	require.NoError(t, err, "what needs no Redis keeps working")

	warns := strings.Count(logs.String(), "level=WARN")
	assert.Less(t, warns, 12, "warnings while Redis is down are throttled, not one per request:\n%s", logs.String())

	rs.Restart()
	require.Eventually(t, func() bool {
		return send(t, http.DefaultClient, http.MethodPost, base+"/v1/chat/completions", chatBody, key...).status == http.StatusOK
	}, 20*time.Second, 100*time.Millisecond, "works again once Redis is back")
	code, _ := getWithKey(t, addr, "/v1/batches", secUserKey)
	assert.Equal(t, http.StatusOK, code)
}

// uploadBatchFile uploads a batch input file and returns its id.
func uploadBatchFile(t *testing.T, base, key, jsonl string) string {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	require.NoError(t, mw.WriteField("purpose", "batch"))
	fw, err := mw.CreateFormFile("file", "in.jsonl")
	require.NoError(t, err)
	_, _ = fw.Write([]byte(jsonl))
	require.NoError(t, mw.Close())
	r := send(t, http.DefaultClient, http.MethodPost, base+"/v1/files", body.Bytes(),
		"Authorization", "Bearer "+key, "Content-Type", mw.FormDataContentType())
	require.Equal(t, http.StatusOK, r.status, r.body)
	var f struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &f))
	return f.ID
}
