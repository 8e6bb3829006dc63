//go:build cuda

package cuda

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Triton's CUDA shared memory, as its clients use it: another process (this test binary, run
// again) allocates device memory and exports its IPC handle; the test registers it over gRPC,
// runs `simple` with both inputs and both outputs in the region, and the other process reads
// the sums and differences back from its own device memory: on the GPU with no copy through
// the host, then on the CPU through it. A byte size larger than the allocation is refused.
func TestCUDASharedMemoryOverGRPC(t *testing.T) {
	if os.Getenv("INFERGATE_SHM_CHILD") == "1" {
		shmChild()
		return
	}
	gpu(t, Limits{})
	p := NewPlacer(Limits{})
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	var opened []*IPCMemory
	srv := gatewaytest.Start(t, gateway.Config{CUDASharedMemory: func(device int64, handle []byte, byteSize uint64) (shm.DeviceMemory, error) {
		m, err := p.OpenIPC(device, handle, byteSize)
		if err != nil {
			return nil, err
		}
		opened = append(opened, m)
		return m, nil
	}})
	srv.Registry.SetPlacer(p)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	client := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()

	c := startChild(t, "TestCUDASharedMemoryOverGRPC", "INFERGATE_SHM_CHILD")
	handle := c.handle()

	_, err = client.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{Name: "too_big", RawHandle: handle, DeviceId: 0, ByteSize: 1 << 30})
	require.Error(t, err, "a byte size past the allocation")
	_, err = client.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{Name: "io", RawHandle: handle, DeviceId: 0, ByteSize: 256})
	require.NoError(t, err)
	st, err := client.CudaSharedMemoryStatus(ctx, &inference.CudaSharedMemoryStatusRequest{})
	require.NoError(t, err)
	require.Equal(t, uint64(256), st.GetRegions()["io"].GetByteSize())

	_, err = client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "simple",
		Parameters: map[string]*inference.ModelRepositoryParameter{"config": {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: `{"instance_group":[{"kind":"KIND_GPU"}]}`}}}})
	require.NoError(t, err)
	region := func(offset int64) map[string]*inference.InferParameter {
		return map[string]*inference.InferParameter{
			"shared_memory_region":    {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "io"}},
			"shared_memory_offset":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: offset}},
			"shared_memory_byte_size": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 64}},
		}
	}
	infer := func() {
		t.Helper()
		res, err := client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Parameters: region(0)},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Parameters: region(64)},
			},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
				{Name: "OUTPUT0", Parameters: region(128)}, {Name: "OUTPUT1", Parameters: region(192)},
			}})
		require.NoError(t, err)
		for _, raw := range res.GetRawOutputContents() {
			require.Empty(t, raw, "outputs in shared memory are not sent")
		}
		c.say("READ")
		out, err := hex.DecodeString(c.next("OUTPUTS "))
		require.NoError(t, err)
		for i := range 16 {
			a, b := int32(i), int32(100*i) // what the child wrote
			require.Equal(t, a+b, int32(binary.LittleEndian.Uint32(out[4*i:])), "OUTPUT0[%d]", i)
			require.Equal(t, a-b, int32(binary.LittleEndian.Uint32(out[64+4*i:])), "OUTPUT1[%d]", i)
		}
		c.say("CLEAR") // the outputs, so the next run must write them again
		c.next("CLEARED")
	}
	require.Len(t, opened, 1)
	// On the GPU, simple reads its inputs and writes its outputs in the region in place: no copy
	// through the host.
	infer()
	require.Zero(t, opened[0].hostCopies.Load(), "host copies of a GPU model's CUDA shared memory")
	// identity_fp32 on the GPU: a device-to-device copy from the input's window to the output's.
	_, err = client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "identity_fp32",
		Parameters: map[string]*inference.ModelRepositoryParameter{"config": {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: `{"instance_group":[{"kind":"KIND_GPU"}]}`}}}})
	require.NoError(t, err)
	_, err = client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{16}, Parameters: region(64)}},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: region(128)}}})
	require.NoError(t, err)
	c.say("READ")
	out, err := hex.DecodeString(c.next("OUTPUTS "))
	require.NoError(t, err)
	for i := range 16 {
		require.Equal(t, uint32(100*i), binary.LittleEndian.Uint32(out[4*i:]), "OUTPUT0[%d]", i)
	}
	c.say("CLEAR")
	c.next("CLEARED")
	require.Zero(t, opened[0].hostCopies.Load(), "host copies of a GPU model's CUDA shared memory")
	// Back on the CPU (a load without an override), the same request goes through the host.
	_, err = client.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: "simple"})
	require.NoError(t, err)
	infer()
	require.Equal(t, int64(4), opened[0].hostCopies.Load(), "two inputs read, two outputs written")
	_, err = client.CudaSharedMemoryUnregister(ctx, &inference.CudaSharedMemoryUnregisterRequest{Name: "io"})
	require.NoError(t, err)
}

// shmChild: 256 bytes of device memory, INPUT0 = 0..15 at 0 and INPUT1 = 0, 100, ..., 1500 at
// 64; prints the IPC handle; on "READ" prints the 128 bytes of outputs at 128, on "CLEAR" zeroes
// them.
func shmChild() {
	buf := make([]byte, 256)
	for i := range 16 {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(i))
		binary.LittleEndian.PutUint32(buf[64+4*i:], uint32(100*i))
	}
	e := export(buf)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "READ":
			e.sync(false)
			fmt.Println("OUTPUTS " + hex.EncodeToString(buf[128:]))
		case "CLEAR":
			clear(buf[128:])
			e.sync(true)
			fmt.Println("CLEARED")
		}
	}
	os.Exit(0)
}
