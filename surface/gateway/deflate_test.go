package gateway_test

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// zlibBytes is msg in gRPC's deflate encoding as gRPC's C core writes it (zlib, RFC 1950), with
// the standard library's writer, independent of the gateway's compressor.
func zlibBytes(t testing.TB, msg []byte) []byte {
	var b bytes.Buffer
	zw, err := zlib.NewWriterLevel(&b, zlib.DefaultCompression)
	require.NoError(t, err)
	_, _ = zw.Write(msg)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func envelope(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

type rawAnswer struct {
	header, trailer http.Header
	body            []byte
}

func (a rawAnswer) grpcStatus() string {
	if s := a.trailer.Get("Grpc-Status"); s != "" {
		return s
	}
	return a.header.Get("Grpc-Status")
}

// rawGRPC sends one enveloped message over h2c with the given headers, as a gRPC C-core client
// (Triton's) would, and returns the answer unparsed.
func rawGRPC(t *testing.T, url string, body []byte, header ...string) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := gatewaytest.H2CClient().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return rawAnswer{header: res.Header, trailer: res.Trailer, body: b}
}

// A deflate request as Triton's C++ client sends it (`-C deflate`: grpc-encoding deflate, and
// grpc-accept-encoding identity,deflate,gzip) is served on native gRPC and answered in deflate;
// a client that does not accept deflate is answered uncompressed, and so is an uncompressed
// request.
func TestNativeGRPCDeflateAsTritonSendsIt(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{})
	msg, err := proto.Marshal(simpleRequest())
	require.NoError(t, err)
	for _, tc := range []struct {
		name, sent, accept, answered string
		stream                       bool
	}{
		{"deflate, accepted", "deflate", "identity,deflate,gzip", "deflate", false},
		{"deflate, only gzip accepted", "deflate", "identity,gzip", "", false},
		{"deflate, no accept list", "deflate", "", "", false},
		{"gzip accepted, deflate not", "deflate", "gzip", "", false},
		{"uncompressed", "", "identity,deflate,gzip", "", false},
		{"stream, deflate, accepted", "deflate", "identity,deflate,gzip", "deflate", true},
		{"stream, deflate, only gzip accepted", "deflate", "identity,gzip", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, hdr := envelope(0, msg), []string{}
			if tc.sent != "" {
				body = envelope(1, zlibBytes(t, msg))
				hdr = append(hdr, "Grpc-Encoding", tc.sent)
			}
			if tc.accept != "" {
				hdr = append(hdr, "Grpc-Accept-Encoding", tc.accept)
			}
			url := srv.URL + "/inference.GRPCInferenceService/ModelInfer"
			if tc.stream {
				url = srv.URL + "/inference.GRPCInferenceService/ModelStreamInfer"
			}
			a := rawGRPC(t, url, body, hdr...)
			require.Equal(t, "0", a.grpcStatus(), "%s %s", a.trailer.Get("Grpc-Message"), a.header.Get("Grpc-Message"))
			require.GreaterOrEqual(t, len(a.body), 5)
			flags, out := a.body[0], a.body[5:]
			require.Len(t, out, int(binary.BigEndian.Uint32(a.body[1:5])))
			if tc.answered == "" {
				assert.Zero(t, flags&1, "answered compressed (%q) to a client that did not accept it", a.header.Get("Grpc-Encoding"))
				assert.Contains(t, []string{"", "identity"}, a.header.Get("Grpc-Encoding"))
			} else {
				require.Equal(t, byte(1), flags&1, "answer not compressed")
				require.Equal(t, tc.answered, a.header.Get("Grpc-Encoding"))
				zr, err := zlib.NewReader(bytes.NewReader(out))
				require.NoError(t, err, "the answer is zlib, as gRPC's C core reads deflate")
				out, err = io.ReadAll(zr)
				require.NoError(t, err)
			}
			if tc.stream {
				res := new(inference.ModelStreamInferResponse)
				require.NoError(t, proto.Unmarshal(out, res))
				require.Empty(t, res.GetErrorMessage())
				checkSimple(t, res.GetInferResponse())
				return
			}
			res := new(inference.ModelInferResponse)
			require.NoError(t, proto.Unmarshal(out, res))
			checkSimple(t, res)
		})
	}
}

// grpc-go clients compressing with deflate, unary and streaming; one that accepts only gzip is
// not answered in deflate (grpc-go's client refuses an answer in an encoding it did not accept).
func TestGRPCGoClientDeflate(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{})
	c := inference.NewGRPCInferenceServiceClient(dial(t, srv.Addr))
	ctx := context.Background()
	res, err := c.ModelInfer(ctx, simpleRequest(), grpc.UseCompressor("deflate"))
	require.NoError(t, err)
	checkSimple(t, res)

	res, err = c.ModelInfer(ctx, simpleRequest(), grpc.UseCompressor("deflate"), experimental.AcceptCompressors("gzip"))
	require.NoError(t, err, "answered in an encoding the client did not accept")
	checkSimple(t, res)

	stream, err := c.ModelStreamInfer(ctx, grpc.UseCompressor("deflate"))
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, stream.Send(simpleRequest()))
		got, err := stream.Recv()
		require.NoError(t, err)
		require.Empty(t, got.GetErrorMessage())
		checkSimple(t, got.GetInferResponse())
	}
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	assert.ErrorIs(t, err, io.EOF)
}

// A deflate message over native gRPC inflates to at most the server's message limit, as a gzip
// one does (TestGRPCCompressedMessageLimit).
func TestGRPCDeflateMessageLimit(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{MaxMessageBytes: 1 << 20})
	c := inference.NewGRPCInferenceServiceClient(dial(t, srv.Addr))
	req := &inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{[]byte(strings.Repeat("ACGT", 1<<19))}}
	_, err := c.ModelInfer(context.Background(), req, grpc.UseCompressor("deflate"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "decompresses to more than 1048576 bytes")
}

// deflateCounter is a Connect client's deflate, counting the answers it inflated.
type deflateCounter struct {
	io.ReadCloser
	inflated *atomic.Int64
}

func (d *deflateCounter) Reset(r io.Reader) error {
	if r == http.NoBody {
		d.ReadCloser = io.NopCloser(http.NoBody)
		return nil
	}
	d.inflated.Add(1)
	zr, err := zlib.NewReader(r)
	d.ReadCloser = zr
	return err
}

// Connect clients of all three protocols send deflate and are answered in it: gRPC (routed to
// grpc-go), gRPC-Web and Connect (connect-go behind the inflating handler).
func TestConnectClientsDeflate(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{})
	for _, tc := range []struct {
		name string
		opts []connect.ClientOption
	}{
		{"grpc", []connect.ClientOption{connect.WithGRPC()}},
		{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
		{"connect", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inflated atomic.Int64
			opts := append(tc.opts,
				connect.WithAcceptCompression("deflate",
					func() connect.Decompressor { return &deflateCounter{inflated: &inflated} },
					func() connect.Compressor { zw, _ := zlib.NewWriterLevel(io.Discard, flate.BestSpeed); return zw }),
				connect.WithSendCompression("deflate"))
			c := inferenceconnect.NewGRPCInferenceServiceClient(gatewaytest.H2CClient(), srv.URL, opts...)
			res, err := c.ModelInfer(context.Background(), simpleRequest())
			require.NoError(t, err)
			checkSimple(t, res)
			assert.Positive(t, inflated.Load(), "the answer was not deflate") // gRPC-Web compresses its trailers frame too
		})
	}
}

func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// deflateBomb is a zlib ModelInferRequest for `simple` whose one raw input is n zero bytes: a
// few tens of KiB per 64 MiB.
func deflateBomb(t testing.TB, n int) []byte {
	var head []byte
	head = append(head, 0x0a, byte(len("simple")))
	head = append(head, "simple"...)
	head = append(head, 0x3a) // raw_input_contents, field 7, bytes
	head = binary.AppendUvarint(head, uint64(n))
	var b bytes.Buffer
	zw, err := zlib.NewWriterLevel(&b, zlib.BestCompression)
	require.NoError(t, err)
	_, _ = zw.Write(head)
	zero := make([]byte, 1<<20)
	for ; n > 0; n -= len(zero) {
		_, _ = zw.Write(zero[:min(n, len(zero))])
	}
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// A deflate bomb sent to every RPC surface is refused while it inflates, as a gzip one is
// (runtime's TestSecurityDecompressionBombs): RESOURCE_EXHAUSTED, and the gateway allocates a
// small part of what the bomb claims.
func TestDeflateBombRefusedOnEverySurface(t *testing.T) {
	if testing.Short() {
		t.Skip("compresses 128 MiB")
	}
	const inflated = 128 << 20
	srv := gatewaytest.Start(t, gateway.Config{})
	bomb := deflateBomb(t, inflated)
	t.Logf("%d MiB in %d KiB of deflate", inflated>>20, len(bomb)>>10)
	for _, tc := range []struct {
		name, path string
		body       []byte
		hdr        []string
		c          *http.Client
	}{
		{"native gRPC unary", "ModelInfer", envelope(1, bomb),
			[]string{"Content-Type", "application/grpc", "Te", "trailers", "Grpc-Encoding", "deflate"}, gatewaytest.H2CClient()},
		{"native gRPC stream", "ModelStreamInfer", envelope(1, bomb),
			[]string{"Content-Type", "application/grpc", "Te", "trailers", "Grpc-Encoding", "deflate"}, gatewaytest.H2CClient()},
		{"gRPC-Web", "ModelInfer", envelope(1, bomb),
			[]string{"Content-Type", "application/grpc-web+proto", "Grpc-Encoding", "deflate"}, http.DefaultClient},
		{"Connect unary", "ModelInfer", bomb,
			[]string{"Content-Type", "application/proto", "Content-Encoding", "deflate", "Connect-Protocol-Version", "1"}, http.DefaultClient},
		{"Connect stream", "ModelStreamInfer", envelope(1, bomb),
			[]string{"Content-Type", "application/connect+proto", "Connect-Content-Encoding", "deflate", "Connect-Protocol-Version", "1"}, gatewaytest.H2CClient()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/inference.GRPCInferenceService/"+tc.path, bytes.NewReader(tc.body))
			require.NoError(t, err)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			before := heapAllocated()
			res, err := tc.c.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			spent := heapAllocated() - before
			answer := string(b) + " " + res.Header.Get("Grpc-Message") + res.Trailer.Get("Grpc-Message")
			assert.Contains(t, answer, "request refused while decompressing", "status %d, %s", res.StatusCode, answer)
			switch st := res.Trailer.Get("Grpc-Status") + res.Header.Get("Grpc-Status"); {
			case st != "":
				assert.Equal(t, "8", st, "RESOURCE_EXHAUSTED")
			case strings.Contains(tc.name, "Connect unary"):
				assert.Equal(t, http.StatusTooManyRequests, res.StatusCode) // Connect's resource_exhausted
			default:
				assert.Contains(t, string(b), "resource_exhausted")
			}
			assert.Less(t, spent, uint64(24<<20), "the gateway allocated %d MiB for a %d MiB bomb", spent>>20, inflated>>20)
		})
	}
}

// BenchmarkDeflateVsGzip is a compressed ModelInfer over native gRPC with deflate against the same
// call with gzip (the baseline, bounded the same way through grpc-go's per-server hook), called
// alternately on one connection: deflate-x is deflate's time over gzip's. A 64 KiB input of
// four-letter text, so the compressing and inflating are a real part of the call.
func BenchmarkDeflateVsGzip(b *testing.B) {
	srv := gatewaytest.Start(b, gateway.Config{})
	conn := dial(b, srv.Addr)
	c := inference.NewGRPCInferenceServiceClient(conn)
	seq := []byte(strings.Repeat("ACGTTGCAAGCT", 64<<10/12))
	req := &inference.ModelInferRequest{ModelName: "simple_identity", // BYTES in, BYTES out
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 1}}},
		RawInputContents: [][]byte{binary.LittleEndian.AppendUint32(nil, uint32(len(seq)))}}
	req.RawInputContents[0] = append(req.RawInputContents[0], seq...)
	arms := [2]string{"deflate", "gzip"}
	for _, enc := range arms {
		if _, err := c.ModelInfer(context.Background(), req, grpc.UseCompressor(enc)); err != nil {
			b.Fatalf("%s: %v", enc, err) // a broken arm must not look fast
		}
	}
	var spent [2]time.Duration
	b.ResetTimer()
	for i := range b.N {
		for k := range 2 {
			arm := (i + k) % 2
			t0 := time.Now()
			if _, err := c.ModelInfer(context.Background(), req, grpc.UseCompressor(arms[arm])); err != nil {
				b.Fatal(err)
			}
			spent[arm] += time.Since(t0)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "deflate-us")
	b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "gzip-us")
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "deflate-x")
}

// On gRPC-Web and Connect too, a deflate request from a client that accepts only gzip is not
// answered in deflate (connect-go picks the answer's encoding from the client's list, once the
// inflating handler has taken the request's off).
func TestHTTPDeflateAnswerHonoursAcceptList(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{})
	msg, err := proto.Marshal(simpleRequest())
	require.NoError(t, err)
	for _, tc := range []struct {
		name           string
		body           []byte
		hdr            []string
		answerEncoding string
	}{
		{"gRPC-Web", envelope(1, zlibBytes(t, msg)), []string{"Content-Type", "application/grpc-web+proto",
			"Grpc-Encoding", "deflate", "Grpc-Accept-Encoding", "gzip"}, "Grpc-Encoding"},
		{"Connect unary", zlibBytes(t, msg), []string{"Content-Type", "application/proto", "Connect-Protocol-Version", "1",
			"Content-Encoding", "deflate", "Accept-Encoding", "gzip"}, "Content-Encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/inference.GRPCInferenceService/ModelInfer", bytes.NewReader(tc.body))
			require.NoError(t, err)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode, "%s", b)
			assert.NotEqual(t, "deflate", res.Header.Get(tc.answerEncoding))
			assert.Contains(t, []string{"", "identity", "gzip"}, res.Header.Get(tc.answerEncoding))
		})
	}
}
