package main

// The security regression suite (issue 17): what an attacker can make the gateway spend or reveal,
// tried against the gateway as the binary builds it (build, in process, so the heap can be
// measured), on every surface. Each case names the defect it guards against.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/guard"
	"github.com/infergate/infergate/adapters/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
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
	cfg, err := parseConfig("test", []byte(yaml))
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gw, closeAll, err := build(cfg, roleGateway, gateway.Config{Logger: log, DrainTimeout: time.Second})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Serve(ln) }()
	t.Cleanup(func() {
		_ = gw.Shutdown(context.Background())
		<-done
		closeAll()
	})
	addr := ln.Addr().String()
	require.Eventually(t, func() bool {
		code, _ := getWithKey(t, addr, "/v1/models/llama", secAdminKey)
		return code == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "the upstream's models are routed")
	return addr
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

// gzipStream compresses head followed by n zero bytes.
func gzipStream(t *testing.T, head []byte, n int) []byte {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	require.NoError(t, err)
	_, _ = zw.Write(head)
	zeros := make([]byte, 1<<20)
	for n > 0 {
		m := min(n, len(zeros))
		_, _ = zw.Write(zeros[:m])
		n -= m
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
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
