//go:build cuda

package cuda

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"unsafe"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/models/builtin"
	"github.com/stretchr/testify/require"
)

// gpu opens GPU 0, or skips the test where this process sees none: unless
// INFERGATE_REQUIRE_GPU=1 (gpucheck.sh sets it), which makes a missing GPU a failure.
func gpu(t testing.TB, lim Limits) *Device {
	t.Helper()
	info, err := Probe()
	if errors.Is(err, ErrUnavailable) {
		if os.Getenv("INFERGATE_REQUIRE_GPU") == "1" {
			t.Fatalf("INFERGATE_REQUIRE_GPU=1 and %v", err)
		}
		t.Skipf("no GPU here (%v): engines/cuda/gpucheck.sh runs these tests on a GPU machine", err)
	}
	require.NoError(t, err)
	t.Logf("driver %d, cuBLAS %q, GPU 0: %+v", info.DriverVersion, info.CUBLAS, info.Devices[0])
	d, err := Open(0, lim)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func builtinConfig(t testing.TB, name string) engines.Model {
	for _, m := range builtin.Models() {
		if m.Config().GetName() == name {
			return m
		}
	}
	t.Fatalf("no built-in %s", name)
	return nil
}

func run(t testing.TB, m engines.Model, req *engines.Request) (*engines.Response, error) {
	var got *engines.Response
	err := m.Execute(context.Background(), req, func(r *engines.Response) error { got = r; return nil })
	return got, err
}

func int32s(r *rand.Rand, n int) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		v := int32(r.Uint32())
		switch i % 7 { // the edges wrapping must get right
		case 0:
			v = math.MaxInt32
		case 1:
			v = math.MinInt32
		}
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// The GPU's simple answers what the CPU's does, wrapping included, for every batch size.
func TestSimpleMatchesCPU(t *testing.T) {
	d := gpu(t, Limits{})
	cpu := builtinConfig(t, "simple")
	m, err := NewSimple(d, cpu.Config(), 2)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, inference.ModelInstanceGroup_KIND_GPU, m.Config().GetInstanceGroup()[0].GetKind())
	r := rand.New(rand.NewPCG(1, 2))
	for batch := 1; batch <= 8; batch++ {
		shape := []int64{int64(batch), 16}
		req := &engines.Request{Inputs: []engines.Tensor{
			{Name: "INPUT0", Datatype: inference.DataType_TYPE_INT32, Shape: shape, Data: int32s(r, batch*16)},
			{Name: "INPUT1", Datatype: inference.DataType_TYPE_INT32, Shape: shape, Data: int32s(r, batch*16)},
		}}
		want, err := run(t, cpu, req)
		require.NoError(t, err)
		got, err := run(t, m, req)
		require.NoError(t, err)
		for i := range 2 {
			require.Equal(t, want.Outputs[i].Name, got.Outputs[i].Name)
			require.Equal(t, want.Outputs[i].Data, got.Outputs[i].Data, "batch %d, %s", batch, got.Outputs[i].Name)
		}
	}
}

// identity_fp32 on the GPU returns every byte it was sent, from 4 bytes to 64 MiB.
func TestIdentityRoundTrip(t *testing.T) {
	d := gpu(t, Limits{})
	m, err := NewIdentity(d, builtinConfig(t, "identity_fp32").Config(), 1)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 1000, 1 << 20, 16 << 20} {
		data := make([]byte, 4*n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		got, err := run(t, m, &engines.Request{Inputs: []engines.Tensor{{Name: "INPUT0", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{int64(n)}, Data: data}}})
		require.NoError(t, err)
		require.Equal(t, data, got.Outputs[0].Data, "%d floats", n)
	}
}

func floatBytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// The dense network on the GPU (cuBLAS SGEMM, the bias and ReLU kernel) matches the CPU
// reference within float32 rounding: the sums are the same, added in another order.
func TestDenseMatchesCPU(t *testing.T) {
	d := gpu(t, Limits{})
	net := dense.Random(5, 256, 1024, 512, 10)
	file, err := net.Encode()
	require.NoError(t, err)
	net, err = dense.Load(file) // as a served model is: from its file
	require.NoError(t, err)
	cpu := dense.NewModel("mlp", net, 64)
	m, err := NewDense(d, "mlp", net, 64, 2)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, cpu.Config().GetInput(), m.Config().GetInput())
	r := rand.New(rand.NewPCG(6, 7))
	for _, rows := range []int{1, 3, 64} {
		x := make([]float32, rows*net.In())
		for i := range x {
			x[i] = 2*r.Float32() - 1
		}
		req := &engines.Request{Inputs: []engines.Tensor{{Name: dense.Input, Datatype: inference.DataType_TYPE_FP32, Shape: []int64{int64(rows), int64(net.In())}, Data: floatBytes(x)}}}
		want, err := run(t, cpu, req)
		require.NoError(t, err)
		got, err := run(t, m, req)
		require.NoError(t, err)
		require.Equal(t, want.Outputs[0].Shape, got.Outputs[0].Shape)
		worst := 0.0
		for i := 0; i < len(want.Outputs[0].Data); i += 4 {
			w := float64(math.Float32frombits(binary.LittleEndian.Uint32(want.Outputs[0].Data[i:])))
			g := float64(math.Float32frombits(binary.LittleEndian.Uint32(got.Outputs[0].Data[i:])))
			worst = max(worst, math.Abs(w-g)/max(1, math.Abs(w)))
		}
		t.Logf("rows %d: largest difference %.2g", rows, worst)
		require.Less(t, worst, 1e-4, "rows %d", rows)
	}
}

// A request past the device pool's cap is refused with RESOURCE_EXHAUSTED, and the pool holds
// nothing for it afterwards.
func TestPoolCapRefuses(t *testing.T) {
	d := gpu(t, Limits{DeviceBytes: 1 << 20})
	m, err := NewIdentity(d, builtinConfig(t, "identity_fp32").Config(), 1)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	data := make([]byte, 4<<20)
	_, err = run(t, m, &engines.Request{Inputs: []engines.Tensor{{Name: "INPUT0", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{1 << 20}, Data: data}}})
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "memory pool")
	inUse, _, _, _, err := d.MemoryUsage()
	require.NoError(t, err)
	require.Zero(t, inUse)
}

// A CUDA IPC handle from another process (a Triton client's role) opens here, and reads what
// that process wrote. The other process is this test binary, run again.
func TestIPCFromAnotherProcess(t *testing.T) {
	if os.Getenv("INFERGATE_IPC_CHILD") == "1" {
		ipcChild()
		return
	}
	d := gpu(t, Limits{})
	handle := startChild(t, "TestIPCFromAnotherProcess", "INFERGATE_IPC_CHILD").handle()
	require.Len(t, handle, ipcHandleSize, "the child's handle")
	p, err := d.OpenIPC(handle)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.CloseIPC(p)) }()
	got := make([]byte, 4096)
	st, err := d.newStream()
	require.NoError(t, err)
	defer st.close()
	require.NoError(t, d.run(func() error {
		if err := st.download(unsafe.Pointer(&got[0]), p, len(got)); err != nil {
			return err
		}
		return st.sync()
	}))
	for i, b := range got {
		require.Equal(t, byte(i*7), b, "byte %d", i)
	}
}

// ipcChild exports 4096 bytes of device memory and holds it until stdin closes.
func ipcChild() {
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	export(data)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	os.Exit(0)
}
