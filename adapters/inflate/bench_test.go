package inflate

import (
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
// (BenchmarkHardening in adapters/gateway measures whole calls).
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
