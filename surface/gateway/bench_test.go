package gateway_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Every benchmark runs infergate and the bare grpc-go baseline (baseline_test.go) as sibling
// sub-benchmarks, BenchmarkX/infergate and BenchmarkX/baseline, in one process and through the same
// kind of grpc-go client, so ratios are read straight from the `go test -bench` output. Goals:
// ModelInfer >= 0.8x baseline req/s with <= 30 µs added p50; ModelStreamInfer >= 0.7x msg/s;
// 64 MiB identity >= 0.8x MB/s with peak heap <= 3x the tensor.

const (
	modelInferMethod  = "/inference.GRPCInferenceService/ModelInfer"
	modelStreamMethod = "/inference.GRPCInferenceService/ModelStreamInfer"
)

// target is one server under test.
type target struct {
	name string
	addr string
	conn *grpc.ClientConn
}

// targets starts infergate and the baseline and connects one grpc-go client to each.
func targets(b *testing.B) []target {
	b.Helper()
	srv := gatewaytest.Start(b, gateway.Config{})
	base := startBaseline(b)
	return []target{
		{"infergate", srv.Addr, dial(b, srv.Addr)},
		{"baseline", base, dial(b, base)},
	}
}

func dial(b testing.TB, addr string) *grpc.ClientConn {
	b.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// simpleRequest is `simple`'s request: INPUT0 = 0..15, INPUT1 = ones, both INT32 [1,16], raw.
func simpleRequest() *inference.ModelInferRequest {
	in0, in1 := make([]byte, 64), make([]byte, 64)
	for i := range 16 {
		binary.LittleEndian.PutUint32(in0[4*i:], uint32(i))
		binary.LittleEndian.PutUint32(in1[4*i:], 1)
	}
	return &inference.ModelInferRequest{
		ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		},
		RawInputContents: [][]byte{in0, in1},
	}
}

// checkSimple fails b unless resp is simple's answer to simpleRequest.
func checkSimple(b testing.TB, resp *inference.ModelInferResponse) {
	b.Helper()
	raw := resp.GetRawOutputContents()
	if len(raw) != 2 || len(raw[0]) != 64 || len(raw[1]) != 64 {
		b.Fatalf("bad simple response: %v", resp)
	}
	o0, o1 := int32(binary.LittleEndian.Uint32(raw[0])), int32(binary.LittleEndian.Uint32(raw[1][60:]))
	if o0 != 1 || o1 != 14 {
		b.Fatalf("simple: OUTPUT0[0] = %d (want 1), OUTPUT1[15] = %d (want 14)", o0, o1)
	}
}

// reportLatency reports the median of durs as p50-us and the achieved rate as req/s.
func reportLatency(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds())/1e3, "p50-us")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkModelInferSimple is unary ModelInfer on `simple` from one grpc-go ClientConn, with 1
// and 16 concurrent callers.
func BenchmarkModelInferSimple(b *testing.B) {
	for _, tg := range targets(b) {
		b.Run(tg.name, func(b *testing.B) {
			// One checked call first, so a broken server cannot look fast.
			ctx := context.Background()
			req := simpleRequest()
			resp := new(inference.ModelInferResponse)
			if err := tg.conn.Invoke(ctx, modelInferMethod, req, resp); err != nil {
				b.Fatal(err)
			}
			checkSimple(b, resp)
			b.Run("c=1", func(b *testing.B) {
				durs := make([]time.Duration, 0, b.N)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					if err := tg.conn.Invoke(ctx, modelInferMethod, req, new(inference.ModelInferResponse)); err != nil {
						b.Fatal(err)
					}
					durs = append(durs, time.Since(t0))
				}
				b.StopTimer()
				reportLatency(b, durs)
			})
			b.Run("c=16", func(b *testing.B) {
				const callers = 16
				procs := runtime.GOMAXPROCS(0)
				if callers%procs != 0 {
					b.Logf("GOMAXPROCS=%d does not divide %d: running %d callers", procs, callers, (callers+procs-1)/procs*procs)
				}
				b.SetParallelism((callers + procs - 1) / procs)
				var (
					mu   sync.Mutex
					durs = make([]time.Duration, 0, b.N)
				)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					local := make([]time.Duration, 0, b.N/callers+1)
					for pb.Next() {
						t0 := time.Now()
						if err := tg.conn.Invoke(ctx, modelInferMethod, req, new(inference.ModelInferResponse)); err != nil {
							b.Error(err)
							return
						}
						local = append(local, time.Since(t0))
					}
					mu.Lock()
					durs = append(durs, local...)
					mu.Unlock()
				})
				b.StopTimer()
				reportLatency(b, durs)
			})
		})
	}
}

// BenchmarkModelStreamInfer is pipelined ModelStreamInfer on `simple` over one bidi stream: one
// goroutine sends b.N requests while the benchmark goroutine receives b.N responses.
func BenchmarkModelStreamInfer(b *testing.B) {
	desc := &grpc.StreamDesc{StreamName: "ModelStreamInfer", ServerStreams: true, ClientStreams: true}
	for _, tg := range targets(b) {
		b.Run(tg.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := tg.conn.NewStream(ctx, desc, modelStreamMethod)
			if err != nil {
				b.Fatal(err)
			}
			req := simpleRequest()
			if err := stream.SendMsg(req); err != nil {
				b.Fatal(err)
			}
			first := new(inference.ModelStreamInferResponse)
			if err := stream.RecvMsg(first); err != nil {
				b.Fatal(err)
			}
			if first.GetErrorMessage() != "" {
				b.Fatal(first.GetErrorMessage())
			}
			checkSimple(b, first.GetInferResponse())

			b.ReportAllocs()
			b.ResetTimer()
			sent := make(chan error, 1)
			go func() {
				for range b.N {
					if err := stream.SendMsg(req); err != nil {
						sent <- err
						return
					}
				}
				sent <- stream.CloseSend()
			}()
			for i := range b.N {
				resp := new(inference.ModelStreamInferResponse)
				if err := stream.RecvMsg(resp); err != nil {
					b.Fatalf("response %d: %v", i, err)
				}
				if msg := resp.GetErrorMessage(); msg != "" {
					b.Fatalf("response %d: %s", i, msg)
				}
			}
			b.StopTimer()
			if err := <-sent; err != nil {
				b.Fatal(err)
			}
			if err := stream.RecvMsg(new(inference.ModelStreamInferResponse)); !errors.Is(err, io.EOF) {
				b.Fatalf("stream end: %v", err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
		})
	}
}

const (
	largeElems = 16 << 20 // FP32 elements: 64 MiB
	largeBytes = 4 * largeElems
)

// BenchmarkIdentityLarge sends a 64 MiB FP32 tensor through `identity_fp32` and back with unary
// ModelInfer. The first call goes through the ordinary proto codec and checks the echoed tensor; the
// timed calls use rawCodec, which sends the request pre-encoded and only measures the response, so
// the client neither marshals nor unmarshals 64 MiB per call and the figures are the server's.
// peak-heap-MiB is the highest "/memory/classes/heap/objects:bytes" (live plus not yet swept),
// sampled every millisecond while the loop runs, minus its value before the server's first large
// call (after a GC, with the encoded request already allocated), so buffers the server keeps pooled
// between calls count; heap/tensor is that over 64 MiB. It still counts
// the whole process, so grpc-go's pooled client buffers are in it, alike for both servers, and
// with the default GOGC it includes garbage the GC has not yet reclaimed. gogc5-heap/tensor is the
// same measure over three more, untimed calls at GOGC=5 after emptying sync.Pools: close to the
// most the calls hold at once.
func BenchmarkIdentityLarge(b *testing.B) {
	data := make([]byte, largeBytes)
	for i := range largeElems {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)))
	}
	req := &inference.ModelInferRequest{
		ModelName: "identity_fp32",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: []int64{largeElems}},
		},
		RawInputContents: [][]byte{data},
	}
	opts := []grpc.CallOption{grpc.MaxCallRecvMsgSize(1 << 30), grpc.MaxCallSendMsgSize(1 << 30)}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	encoded := rawRequest(wire)
	// Peaks are measured from the heap before a server's first large call (b.Run may call a
	// sub-benchmark more than once), so buffers a server keeps pooled between calls count as what
	// it holds.
	freshHeap := map[string]uint64{}
	for _, tg := range targets(b) {
		b.Run(tg.name, func(b *testing.B) {
			ctx := context.Background()
			fresh, ok := freshHeap[tg.name]
			if !ok {
				runtime.GC()
				runtime.GC()
				fresh = heapObjects()
				freshHeap[tg.name] = fresh
			}
			resp := new(inference.ModelInferResponse)
			if err := tg.conn.Invoke(ctx, modelInferMethod, req, resp, opts...); err != nil {
				b.Fatal(err)
			}
			raw := resp.GetRawOutputContents()
			if len(raw) != 1 || len(raw[0]) != largeBytes {
				b.Fatalf("identity_fp32: got %d outputs, want one of %d bytes", len(raw), largeBytes)
			}
			for _, i := range []int{0, 1, largeElems / 2, largeElems - 1} {
				if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[0][4*i:])); v != float32(i) {
					b.Fatalf("identity_fp32: element %d = %v, want %v", i, v, float32(i))
				}
			}
			resp, raw = nil, nil
			rawOpts := []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}
			var got rawResponse
			if err := tg.conn.Invoke(ctx, modelInferMethod, encoded, &got, rawOpts...); err != nil {
				b.Fatal(err)
			}
			if got.n < largeBytes {
				b.Fatalf("identity_fp32 over rawCodec: %d response bytes, want > %d", got.n, largeBytes)
			}

			runtime.GC()
			before := heapObjects()
			stop := samplePeak()
			b.SetBytes(largeBytes)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := tg.conn.Invoke(ctx, modelInferMethod, encoded, &got, rawOpts...); err != nil {
					b.Fatal(err)
				}
				if got.n < largeBytes {
					b.Fatalf("identity_fp32: %d response bytes, want > %d", got.n, largeBytes)
				}
			}
			b.StopTimer()
			peak := max(stop(), before) - min(fresh, before)
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(peak)/largeBytes, "heap/tensor")

			// Untimed: the same peak with GOGC=5, so that garbage and GC slack hardly count and
			// what remains is what a call holds at once.
			old := debug.SetGCPercent(5)
			runtime.GC()
			runtime.GC() // the second GC empties sync.Pools
			before = heapObjects()
			stop = samplePeak()
			for range 3 {
				if err := tg.conn.Invoke(ctx, modelInferMethod, encoded, &got, rawOpts...); err != nil {
					b.Fatal(err)
				}
			}
			peak = max(stop(), before) - min(fresh, before)
			b.ReportMetric(float64(peak)/largeBytes, "gogc5-heap/tensor")

			// Untimed: the same three calls from a client in another process (this test binary
			// re-run as TestLargeClientProcess), so the sampled heap is the server's alone.
			runtime.GC()
			runtime.GC()
			before = heapObjects()
			stop = samplePeak()
			cmd := exec.Command(os.Args[0], "-test.run=^TestLargeClientProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), largeClientEnv+"="+tg.addr)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("client process: %v\n%s", err, out)
			}
			peak = max(stop(), before) - min(fresh, before)
			debug.SetGCPercent(old)
			b.ReportMetric(float64(peak)/largeBytes, "server-heap/tensor")
		})
	}
}

// largeClientEnv names the server TestLargeClientProcess calls; unset, that test skips.
const largeClientEnv = "INFERGATE_LARGE_CLIENT_ADDR"

// TestLargeClientProcess is BenchmarkIdentityLarge's out-of-process client: three 64 MiB calls.
func TestLargeClientProcess(t *testing.T) {
	addr := os.Getenv(largeClientEnv)
	if addr == "" {
		t.Skip("run by BenchmarkIdentityLarge as its client process")
	}
	data := make([]byte, largeBytes)
	wire, err := proto.Marshal(&inference.ModelInferRequest{
		ModelName:        "identity_fp32",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{largeElems}}},
		RawInputContents: [][]byte{data},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30), grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 3 {
		var got rawResponse
		if err := conn.Invoke(context.Background(), modelInferMethod, rawRequest(wire), &got); err != nil {
			t.Fatal(err)
		}
		if got.n < largeBytes {
			t.Fatalf("%d response bytes, want > %d", got.n, largeBytes)
		}
	}
}

// rawRequest is an already encoded message; rawResponse records only an answer's encoded size.
type (
	rawRequest  []byte
	rawResponse struct{ n int }
)

// rawCodec sends rawRequest as is and reads a reply's size into rawResponse without decoding or
// even joining its buffers. Its name is "proto", so the wire content type is application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(rawRequest))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawResponse).n = data.Len()
	return nil
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// samplePeak samples heapObjects every millisecond until the returned func is called, which
// returns the highest value seen.
func samplePeak() (stop func() uint64) {
	done, result := make(chan struct{}), make(chan uint64)
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		peak := heapObjects()
		for {
			select {
			case <-done:
				result <- max(peak, heapObjects())
				return
			case <-t.C:
				peak = max(peak, heapObjects())
			}
		}
	}()
	return func() uint64 { close(done); return <-result }
}
