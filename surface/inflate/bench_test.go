package inflate

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// BenchmarkUncompressedCost is what the bounds cost a request that is not compressed, the common
// case, on each path, against the same step without them (baseline): the HTTP middleware's
// header checks, and a gRPC message read through the deferring codec and the registrar's
// receive. Reports added-ns, the difference per request, to set against a whole call's time
// (BenchmarkHardening in surface/gateway measures whole calls).
func BenchmarkUncompressedCost(b *testing.B) {
	in := New(Config{})
	b.Run("http", func(b *testing.B) {
		noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
		req := httptest.NewRequest(http.MethodPost, "/inference.GRPCInferenceService/ModelInfer", nil)
		req.Header.Set("Content-Type", "application/proto")
		w := httptest.NewRecorder()
		bounded := in.Handler(noop)
		interleave(b, func() error { bounded.ServeHTTP(w, req); return nil }, func() error { noop.ServeHTTP(w, req); return nil })
	})
	b.Run("grpc", func(b *testing.B) {
		msg, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{make([]byte, 64), make([]byte, 64)}})
		stock := encoding.GetCodecV2(grpcproto.Name)
		g := in.GRPC(stock, 1<<30)
		data := mem.BufferSlice{mem.SliceBuffer(msg)}
		interleave(b,
			func() error { v := new(inference.ModelInferRequest); return g.receive(v, g.codec.Unmarshal(data, v)) },
			func() error { return stock.Unmarshal(data, new(inference.ModelInferRequest)) })
	})
}

// interleave runs bounded and baseline b.N times each, in alternating rounds of 100, and reports
// the time bounded adds per call.
func interleave(b *testing.B, bounded, baseline func() error) {
	const round = 100
	var spent [2]time.Duration
	arms := [2]func() error{bounded, baseline}
	b.ResetTimer()
	for i := 0; i < b.N; i += round {
		for k := range 2 {
			arm := (i/round + k) % 2
			t0 := time.Now()
			for range round {
				if err := arms[arm](); err != nil {
					b.Fatal(err)
				}
			}
			spent[arm] += time.Since(t0)
		}
	}
	n := float64((b.N + round - 1) / round * round)
	b.ReportMetric(float64(spent[0].Nanoseconds())/n, "bounded-ns")
	b.ReportMetric(float64(spent[1].Nanoseconds())/n, "baseline-ns")
	b.ReportMetric(float64(spent[0]-spent[1])/n, "added-ns")
}

// BenchmarkDeflateServerRead is a deflate message's read on a grpc-go server (the registered
// compressor finding receiveDeferring on the stack and passing the message on, the codec
// copying it out of grpc-go's buffers, the call inflating it) against a gzip message's read of
// the same data through grpc-go's per-server hook (the baseline). 16 KiB of text-like data.
func BenchmarkDeflateServerRead(b *testing.B) {
	in := New(Config{})
	msg, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{text(16 << 10)}})
	g := in.GRPC(encoding.GetCodecV2(grpcproto.Name), 1<<30)
	deflate, gzipped := zl(b, msg), gz(b, msg)
	c := encoding.GetCompressor(deflateName)
	read := func(pass func() ([]byte, error)) error {
		v := new(inference.ModelInferRequest)
		return g.receive(v, receiveDeferring(recvFunc(func(any) error {
			b, err := pass()
			if err != nil {
				return err
			}
			return g.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v)
		}), v))
	}
	interleave(b,
		func() error {
			return read(func() ([]byte, error) {
				r, err := c.Decompress(bytes.NewReader(deflate))
				if err != nil {
					return nil, err
				}
				return io.ReadAll(r)
			})
		},
		func() error { return read(func() ([]byte, error) { return passGzip{}.Do(bytes.NewReader(gzipped)) }) })
}
