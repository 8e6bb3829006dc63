//go:build cuda

package cuda

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkCopy: host-to-device and device-to-host bandwidth, per tensor size, of the two
// paths the engine has between Go memory and the device (staged: a memcpy into the pinned
// pool, then the DMA; direct: the driver's own staging of pageable memory) against the bus's
// peak (cuMemcpy between pinned memory and the device, the fastest a copy goes). MB/s is go
// test's; of-peak is the share of the peak measured in the same run. directBytes picks the
// path by size.
func BenchmarkCopy(b *testing.B) {
	d := gpu(b, Limits{DeviceBytes: 512 << 20, PinnedBytes: 512 << 20})
	st, err := d.newStream()
	require.NoError(b, err)
	b.Cleanup(st.close)
	for _, n := range []int{64 << 10, 1 << 20, 16 << 20, 64 << 20} {
		s := &staging{d: d}
		var dev uintptr
		var pinned []byte
		require.NoError(b, d.run(func() error {
			var err error
			if dev, err = s.device(n); err != nil {
				return err
			}
			pinned, err = s.host(n)
			return err
		}))
		goMem := make([]byte, n)
		for _, dir := range []string{"h2d", "d2h"} {
			var peak float64
			for _, path := range []string{"peak", "staged", "direct"} {
				b.Run(fmt.Sprintf("%s/%dKiB/%s", dir, n>>10, path), func(b *testing.B) {
					b.SetBytes(int64(n))
					start := time.Now()
					for b.Loop() {
						require.NoError(b, d.run(func() error { return copyOnce(d, st, dir, path, dev, pinned, goMem) }))
					}
					gbs := float64(n) * float64(b.N) / time.Since(start).Seconds() / 1e9
					b.ReportMetric(gbs, "GB/s")
					if path == "peak" {
						peak = gbs
					} else if peak > 0 {
						b.ReportMetric(gbs/peak, "of-peak")
					}
				})
			}
		}
		s.release()
	}
}

// copyOnce is one copy of BenchmarkCopy's, synchronized.
func copyOnce(d *Device, st *stream, dir, path string, dev uintptr, pinned, goMem []byte) error {
	n := len(goMem)
	switch dir + "/" + path {
	case "h2d/peak":
		if err := st.upload(dev, unsafe.Pointer(&pinned[0]), n); err != nil {
			return err
		}
	case "d2h/peak":
		if err := st.download(unsafe.Pointer(&pinned[0]), dev, n); err != nil {
			return err
		}
	case "h2d/staged", "d2h/staged":
		s := &staging{d: d}
		defer s.release()
		if dir == "h2d" {
			h, err := s.host(n)
			if err != nil {
				return err
			}
			copy(h, goMem)
			if err := st.upload(dev, unsafe.Pointer(&h[0]), n); err != nil {
				return err
			}
			return st.sync()
		}
		h, err := s.download(st, dev, n)
		if err != nil {
			return err
		}
		if err := st.sync(); err != nil {
			return err
		}
		copy(goMem, h)
		return nil
	case "h2d/direct":
		if err := st.upload(dev, unsafe.Pointer(&goMem[0]), n); err != nil {
			return err
		}
	case "d2h/direct":
		if err := st.download(unsafe.Pointer(&goMem[0]), dev, n); err != nil {
			return err
		}
	}
	return st.sync()
}

// BenchmarkGEMM: one dense layer on the GPU (the engine's SGEMM and its bias-and-ReLU kernel)
// against cuBLAS's SGEMM alone on the same 4096×4096×4096 shape, timed on the device with
// CUDA events; of-cublas is the layer's throughput as a share of cuBLAS's measured in the run.
func BenchmarkGEMM(b *testing.B) {
	d := gpu(b, Limits{DeviceBytes: 1 << 30})
	const rows, in, out = 4096, 4096, 4096
	net := dense.Random(9, in, out, 1) // the first layer is the one measured
	m, err := NewDense(d, "gemm", net, rows, 1)
	require.NoError(b, err)
	b.Cleanup(m.Close)
	inst := m.is.all[0]
	s := &staging{d: d}
	b.Cleanup(s.release)
	var x, y uintptr
	require.NoError(b, d.run(func() error {
		var err error
		if x, err = s.device(4 * rows * in); err != nil {
			return err
		}
		if y, err = s.device(4 * rows * out); err != nil {
			return err
		}
		return inst.st.gemmHandle()
	}))
	// Warm up: the first SGEMMs load cuBLAS's kernels and raise the GPU's clocks.
	require.NoError(b, d.run(func() error {
		for range 10 {
			if err := inst.st.gemm(y, x, m.layers[0].w, rows, in, out); err != nil {
				return err
			}
		}
		return inst.st.sync()
	}))
	var cublas float64
	for _, arm := range []string{"cublas", "layer"} {
		b.Run(arm, func(b *testing.B) {
			var ms float64
			for b.Loop() {
				require.NoError(b, d.run(func() error {
					t, err := newTimer()
					if err != nil {
						return err
					}
					defer t.close()
					if err := t.begin(inst.st); err != nil {
						return err
					}
					if err := inst.st.gemm(y, x, m.layers[0].w, rows, in, out); err != nil {
						return err
					}
					if arm == "layer" {
						inst.a.set(uint64(y), uint64(m.layers[0].b), rows, out, 1)
						if err := inst.st.launch(d.biasAct, rows*out, inst.a); err != nil {
							return err
						}
					}
					if err := t.stop(inst.st); err != nil {
						return err
					}
					e, err := t.elapsed()
					ms += e
					return err
				}))
			}
			tflops := 2 * float64(rows) * in * out * float64(b.N) / (ms / 1e3) / 1e12
			b.ReportMetric(tflops, "TFLOP/s")
			if arm == "cublas" {
				cublas = tflops
			} else if cublas > 0 {
				b.ReportMetric(tflops/cublas, "of-cublas")
			}
		})
	}
}

// inferServer serves net as mlp_cpu (the CPU engine) and mlp_gpu (this one) on a real gateway,
// and returns a gRPC client of it.
func inferServer(tb testing.TB, net *dense.Network, instances int) inference.GRPCInferenceServiceClient {
	d := gpu(tb, Limits{})
	g, err := NewDense(d, "mlp_gpu", net, 64, instances)
	require.NoError(tb, err)
	tb.Cleanup(g.Close)
	srv := gatewaytest.Start(tb, gateway.Config{}, dense.NewModel("mlp_cpu", net, 64), g)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}

func inferRequest(model string, net *dense.Network, rows int, seed uint64) *inference.ModelInferRequest {
	r := rand.New(rand.NewPCG(seed, 1))
	raw := make([]byte, 4*rows*net.In())
	for i := 0; i < len(raw); i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(2*r.Float32()-1))
	}
	return &inference.ModelInferRequest{ModelName: model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: dense.Input, Datatype: "FP32", Shape: []int64{int64(rows), int64(net.In())}}},
		RawInputContents: [][]byte{raw}}
}

// ModelInfer over real gRPC gives the same answer from the GPU model as from the CPU one.
func TestModelInferGPUMatchesCPU(t *testing.T) {
	net := dense.Random(11, 128, 512, 16)
	client := inferServer(t, net, 2)
	for _, rows := range []int{1, 7, 64} {
		var outs [2][]byte
		for i, model := range []string{"mlp_cpu", "mlp_gpu"} {
			res, err := client.ModelInfer(context.Background(), inferRequest(model, net, rows, uint64(rows)))
			require.NoError(t, err)
			require.Equal(t, []int64{int64(rows), 16}, res.GetOutputs()[0].GetShape())
			outs[i] = res.GetRawOutputContents()[0]
		}
		require.Len(t, outs[1], len(outs[0]))
		for i := 0; i < len(outs[0]); i += 4 {
			w := float64(math.Float32frombits(binary.LittleEndian.Uint32(outs[0][i:])))
			g := float64(math.Float32frombits(binary.LittleEndian.Uint32(outs[1][i:])))
			require.InDelta(t, w, g, 1e-4*max(1, math.Abs(w)), "rows %d, value %d", rows, i/4)
		}
	}
}

// BenchmarkModelInfer: the dense model (1024→4096→4096→1024, 4 rows a request) over real gRPC
// on the GPU against the same model on the CPU engine, at 1 and 16 requests in flight, each arm
// for a fixed time, interleaved; reports requests/s, p50 latency and the GPU's speedup. Run it
// with -benchtime=1x: b.N is not the measure.
func BenchmarkModelInfer(b *testing.B) {
	net := dense.Random(12, 1024, 4096, 4096, 1024)
	client := inferServer(b, net, 4)
	for _, c := range []int{1, 16} {
		b.Run("c="+strconv.Itoa(c), func(b *testing.B) {
			rate := map[string]float64{}
			for b.Loop() {
				for _, model := range []string{"mlp_cpu", "mlp_gpu"} {
					n, p50 := load(b, client, inferRequest(model, net, 4, 1), c, 3*time.Second)
					rate[model] = n
					b.ReportMetric(n, model[4:]+"-req/s")
					b.ReportMetric(float64(p50.Microseconds()), model[4:]+"-p50-µs")
				}
			}
			b.ReportMetric(rate["mlp_gpu"]/rate["mlp_cpu"], "gpu/cpu")
		})
	}
}

// load sends req from c goroutines for d and returns requests/s and the median latency.
func load(tb testing.TB, client inference.GRPCInferenceServiceClient, req *inference.ModelInferRequest, c int, d time.Duration) (float64, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	start := time.Now()
	for range c {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := client.ModelInfer(context.Background(), req); err != nil {
					tb.Error(err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return float64(len(lat)) / elapsed.Seconds(), lat[len(lat)/2]
}

// Triton's way of choosing the GPU: a load whose config override sets instance_group
// { kind: KIND_GPU } moves `simple` onto the GPU (the registry's placer); a model with no GPU
// version is refused with UNIMPLEMENTED; a dense model registered with KIND_GPU runs there.
// Over real gRPC, with the placer the runtime installs.
func TestPlacerOverGRPC(t *testing.T) {
	gpu(t, Limits{}) // skips without a GPU
	p := NewPlacer(Limits{})
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	srv := gatewaytest.Start(t, gateway.Config{})
	srv.Registry.SetPlacer(p)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	load := func(model, config string) error {
		_, err := client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: model,
			Parameters: map[string]*inference.ModelRepositoryParameter{"config": {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: config}}}})
		return err
	}
	require.NoError(t, load("simple", `{"instance_group":[{"kind":"KIND_GPU","count":2}]}`))
	cfg, err := client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	require.Equal(t, inference.ModelInstanceGroup_KIND_GPU, cfg.GetConfig().GetInstanceGroup()[0].GetKind())
	in := make([]byte, 4*16)
	for i := range 16 {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(int32(i-8)))
	}
	res, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}}},
		RawInputContents: [][]byte{in, in}})
	require.NoError(t, err)
	for i := range 16 {
		require.Equal(t, int32(2*(i-8)), int32(binary.LittleEndian.Uint32(res.GetRawOutputContents()[0][4*i:])))
		require.Zero(t, binary.LittleEndian.Uint32(res.GetRawOutputContents()[1][4*i:]))
	}
	stats, err := client.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "simple"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), stats.GetModelStats()[0].GetInferenceCount())

	err = load("repeat_int32", `{"instance_group":[{"kind":"KIND_GPU"}]}`)
	require.Error(t, err)
	require.Contains(t, err.Error(), "no GPU version")

	net := dense.Random(13, 32, 64, 8)
	_, err = srv.Registry.Register(dense.NewModel("mlp", net, 16).OnInstances(inference.ModelInstanceGroup_KIND_GPU, 1, nil))
	require.NoError(t, err)
	res, err = client.ModelInfer(ctx, inferRequest("mlp", net, 3, 5))
	require.NoError(t, err)
	x := make([]float32, 3*32)
	req := inferRequest("mlp", net, 3, 5)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(req.GetRawInputContents()[0][4*i:]))
	}
	want := make([]float32, 3*8)
	net.Forward(want, x, 3, nil)
	for i, w := range want {
		require.InDelta(t, w, math.Float32frombits(binary.LittleEndian.Uint32(res.GetRawOutputContents()[0][4*i:])), 1e-4)
	}
}
