//go:build linux

package kserve_test

import (
	"context"
	"sync"
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/require"
)

// pointedMemory is a fake CUDA region whose memory says where it is on GPU 0 (as the GPU
// engine's does), and counts the copies through the host it is asked for.
type pointedMemory struct {
	*fakeDeviceMemory
	base   uintptr
	copies *int
	mu     *sync.Mutex
}

func (p pointedMemory) DevicePointer() (int, uintptr) { return 0, p.base }

func (p pointedMemory) ReadAt(b []byte, off int64) error {
	p.mu.Lock()
	*p.copies++
	p.mu.Unlock()
	return p.fakeDeviceMemory.ReadAt(b, off)
}

func (p pointedMemory) WriteAt(b []byte, off int64) error {
	p.mu.Lock()
	*p.copies++
	p.mu.Unlock()
	return p.fakeDeviceMemory.WriteAt(b, off)
}

// gpuModel is a model "on GPU 0": it records the device buffers it is given and answers its
// output in place when it has somewhere to write it.
type gpuModel struct {
	cfg     *inference.ModelConfig
	mu      sync.Mutex
	input   *engines.DeviceBuffer
	data    []byte
	outputs *engines.DeviceBuffer
}

func (m *gpuModel) Config() *inference.ModelConfig { return m.cfg }
func (m *gpuModel) GPU() int                       { return 0 }
func (m *gpuModel) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	m.mu.Lock()
	in := req.Input("IN")
	m.input, m.data, m.outputs = in.Device, in.Data, req.OutputBuffer("OUT")
	m.mu.Unlock()
	out := engines.Tensor{Name: "OUT", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{4}}
	if b := req.OutputBuffer("OUT"); b != nil {
		out.Device = b
	} else {
		out.Data = make([]byte, 16)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{out}})
}

// A model on a GPU is given a CUDA region's inputs and outputs where they are on the device,
// and the gateway copies nothing through the host for it; a model on the CPU gets them copied.
func TestCUDASharedMemoryInPlaceForGPUModels(t *testing.T) {
	gpu := newFakeGPU()
	var mu sync.Mutex
	copies := 0
	const base = 0x7f0000000000
	open := func(device int64, handle []byte, size uint64) (shm.DeviceMemory, error) {
		d, err := gpu.open(device, handle, size)
		if err != nil {
			return nil, err
		}
		return pointedMemory{fakeDeviceMemory: d.(*fakeDeviceMemory), base: base, copies: &copies, mu: &mu}, nil
	}
	cfg := func(name string, kind inference.ModelInstanceGroup_Kind) *inference.ModelConfig {
		return &inference.ModelConfig{Name: name, Platform: "test",
			Input:         []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_FP32, Dims: []int64{4}}},
			Output:        []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_FP32, Dims: []int64{4}}},
			InstanceGroup: []*inference.ModelInstanceGroup{{Kind: kind, Count: 1}}}
	}
	onGPU := &gpuModel{cfg: cfg("on_gpu", inference.ModelInstanceGroup_KIND_GPU)}
	onCPU := &gpuModel{cfg: cfg("on_cpu", inference.ModelInstanceGroup_KIND_CPU)}
	srv := gatewaytest.Start(t, gateway.Config{CUDASharedMemory: open}, onGPU, cpuOnly{onCPU})
	c := clients(t, srv)[0]
	ctx := context.Background()
	handle, _ := gpu.alloc(64)
	require.NoError(t, registerCUDA(ctx, c, "r", handle, 0, 64))

	req := func(model string) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: model,
			Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "FP32", Shape: []int64{4}, Parameters: shmParams("r", 16, 16)}},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: shmParams("r", 16, 48)}}}
	}
	_, err := call[inference.ModelInferRequest, inference.ModelInferResponse](ctx, c, "ModelInfer", req("on_gpu"))
	require.NoError(t, err)
	require.Equal(t, &engines.DeviceBuffer{Ordinal: 0, Ptr: base + 16, Len: 16}, onGPU.input)
	require.Nil(t, onGPU.data)
	require.Equal(t, &engines.DeviceBuffer{Ordinal: 0, Ptr: base + 48, Len: 16}, onGPU.outputs)
	require.Zero(t, copies, "copies through the host for a GPU model")

	_, err = call[inference.ModelInferRequest, inference.ModelInferResponse](ctx, c, "ModelInfer", req("on_cpu"))
	require.NoError(t, err)
	require.Nil(t, onCPU.input)
	require.Len(t, onCPU.data, 16)
	require.Nil(t, onCPU.outputs)
	require.Equal(t, 2, copies, "the input read and the output written")

	// A shape the bytes do not hold is refused by size, in GPU memory as on the host.
	bad := req("on_gpu")
	bad.Inputs[0].Parameters = shmParams("r", 12, 16)
	_, err = call[inference.ModelInferRequest, inference.ModelInferResponse](ctx, c, "ModelInfer", bad)
	require.ErrorContains(t, err, "input byte size mismatch")
	_, closed := gpu.counts(t)
	require.Zero(t, closed, "the region is still registered")
}

// cpuOnly hides a model's GPU method: a model on the CPU.
type cpuOnly struct{ m *gpuModel }

func (c cpuOnly) Config() *inference.ModelConfig { return c.m.Config() }
func (c cpuOnly) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	return c.m.Execute(ctx, req, send)
}
