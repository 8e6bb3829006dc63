//go:build linux

package kserve_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// clientRegion is a POSIX shared memory object the test creates as Triton's Python shm utility
// does (shm_open(O_CREAT|O_RDWR), ftruncate, mmap), mapped on the client side.
type clientRegion struct {
	key  string // "/name", as Triton's clients pass it
	path string
	mem  []byte
}

var regionSeq atomic.Int64

func newClientRegion(t testing.TB, size int) *clientRegion {
	t.Helper()
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm on this host")
	}
	name := fmt.Sprintf("infergate_test_%d_%d", os.Getpid(), regionSeq.Add(1))
	path := "/dev/shm/" + name
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Ftruncate(fd, int64(size)))
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	r := &clientRegion{key: "/" + name, path: path, mem: mem}
	t.Cleanup(func() {
		_ = unix.Munmap(r.mem)
		_ = os.Remove(path)
	})
	return r
}

func strParam(s string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}
}

// shmParams are the parameters Triton's gRPC client sets in set_shared_memory: region and byte
// size always, the offset only when not zero.
func shmParams(region string, size, offset int64) map[string]*inference.InferParameter {
	p := map[string]*inference.InferParameter{"shared_memory_region": strParam(region), "shared_memory_byte_size": int64Param(size)}
	if offset != 0 {
		p["shared_memory_offset"] = int64Param(offset)
	}
	return p
}

func register(ctx context.Context, c *client, name, key string, offset, size uint64) error {
	_, err := call[inference.SystemSharedMemoryRegisterRequest, inference.SystemSharedMemoryRegisterResponse](ctx, c, "SystemSharedMemoryRegister",
		&inference.SystemSharedMemoryRegisterRequest{Name: name, Key: key, Offset: offset, ByteSize: size})
	return err
}

func unregister(ctx context.Context, c *client, name string) error {
	_, err := call[inference.SystemSharedMemoryUnregisterRequest, inference.SystemSharedMemoryUnregisterResponse](ctx, c, "SystemSharedMemoryUnregister",
		&inference.SystemSharedMemoryUnregisterRequest{Name: name})
	return err
}

// simpleShmRequest is simple_grpc_shm_client's request: both inputs in one region (INPUT1 at
// offset 64), both outputs in another.
func simpleShmRequest(in, out string) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Parameters: shmParams(in, 64, 0)},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Parameters: shmParams(in, 64, 64)},
		},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "OUTPUT0", Parameters: shmParams(out, 64, 0)},
			{Name: "OUTPUT1", Parameters: shmParams(out, 64, 64)},
		},
	}
}

func TestSharedMemorySimpleGRPC(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	for i, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			in, out := newClientRegion(t, 128), newClientRegion(t, 128)
			copy(in.mem, tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })))
			copy(in.mem[64:], tensor.Bytes(seq(16, func(int) int32 { return 1 })))
			inName, outName := fmt.Sprintf("input_data_%d", i), fmt.Sprintf("output_data_%d", i)

			// As the example client starts: unregister everything, CUDA included.
			require.NoError(t, unregister(ctx, c, inName))
			_, err := call[inference.CudaSharedMemoryUnregisterRequest, inference.CudaSharedMemoryUnregisterResponse](ctx, c, "CudaSharedMemoryUnregister", &inference.CudaSharedMemoryUnregisterRequest{})
			require.NoError(t, err)

			require.NoError(t, register(ctx, c, outName, out.key, 0, 128))
			require.NoError(t, register(ctx, c, inName, in.key, 0, 128))
			resp, err := infer(ctx, c, simpleShmRequest(inName, outName))
			require.NoError(t, err)
			require.Len(t, resp.Outputs, 2)
			assert.Equal(t, "OUTPUT0", resp.Outputs[0].Name)
			assert.Equal(t, []int64{1, 16}, resp.Outputs[1].Shape)
			assert.Equal(t, [][]byte{{}, {}}, resp.RawOutputContents, "outputs in shared memory travel empty, as from Triton")
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i + 1) }), int32s(out.mem[:64]))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i - 1) }), int32s(out.mem[64:]))

			st, err := call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{Name: inName})
			require.NoError(t, err)
			require.Len(t, st.Regions, 1)
			r := st.Regions[inName]
			assert.Equal(t, inName, r.GetName())
			assert.Equal(t, in.key, r.GetKey())
			assert.Equal(t, uint64(128), r.GetByteSize())

			require.NoError(t, unregister(ctx, c, inName))
			require.NoError(t, unregister(ctx, c, outName))
			_, err = call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{Name: inName})
			requireStatus(t, err, connect.CodeNotFound, "Unable to find system shared memory region: '"+inName+"'")
		})
	}
}

// A mix: INPUT0 in shared memory, INPUT1 raw, OUTPUT1 returned in the response.
func TestSharedMemoryMixedWithRaw(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	in, out := newClientRegion(t, 64), newClientRegion(t, 64)
	copy(in.mem, tensor.Bytes(seq(16, func(i int) int32 { return int32(10 * i) })))
	require.NoError(t, register(ctx, c, "in", in.key, 0, 64))
	require.NoError(t, register(ctx, c, "out", out.key, 0, 64))
	req := &inference.ModelInferRequest{
		ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Parameters: shmParams("in", 64, 0)},
			rawInput("INPUT1", "INT32", []int64{1, 16}),
		},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "OUTPUT0", Parameters: shmParams("out", 64, 0)}, {Name: "OUTPUT1"},
		},
		RawInputContents: [][]byte{tensor.Bytes(seq(16, func(int) int32 { return 1 }))},
	}
	resp, err := infer(ctx, c, req)
	require.NoError(t, err)
	assert.Equal(t, seq(16, func(i int) int32 { return int32(10*i + 1) }), int32s(out.mem))
	assert.Empty(t, resp.RawOutputContents[0])
	assert.Equal(t, seq(16, func(i int) int32 { return int32(10*i - 1) }), int32s(resp.RawOutputContents[1]))
}

func TestSharedMemoryErrorsGRPC(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	in, out := newClientRegion(t, 128), newClientRegion(t, 128)
	require.NoError(t, register(ctx, c, "in", in.key, 0, 128))
	require.NoError(t, register(ctx, c, "out", out.key, 0, 128))

	t.Run("register", func(t *testing.T) {
		requireStatus(t, register(ctx, c, "in", in.key, 0, 128), connect.CodeAlreadyExists, "shared memory region 'in' already in manager")
		requireStatus(t, register(ctx, c, "x", "/infergate_no_such_object", 0, 8), connect.CodeInternal, "Unable to open shared memory region: '/infergate_no_such_object'")
		requireStatus(t, register(ctx, c, "x", in.key, 0, 129), connect.CodeInvalidArgument, "failed to register shared memory region 'x': invalid args")
		requireStatus(t, register(ctx, c, "x", in.key, 128, 1), connect.CodeInvalidArgument, "failed to register shared memory region 'x': invalid args")
		requireStatus(t, register(ctx, c, "x", in.key, 1<<63, 1<<63), connect.CodeInvalidArgument, "failed to register shared memory region 'x': invalid args")
		requireStatus(t, register(ctx, c, "x", in.key, 0, 0), connect.CodeInvalidArgument, "failed to register shared memory region 'x': invalid args")
		for _, key := range []string{"", "/", "//x", "/../etc/passwd", "..", "/.", "/dev/shm/x", "a/b", "x\x00y", "/" + string(make([]byte, 256))} {
			requireStatus(t, register(ctx, c, "x", key, 0, 8), connect.CodeInvalidArgument, "cannot register shared memory region 'x' - invalid shm key '"+key+"'")
		}
		requireStatus(t, register(ctx, c, "x", "/triton_python_backend_shm_region_1", 0, 8), connect.CodeInvalidArgument,
			"cannot register shared memory region 'x' with key '/triton_python_backend_shm_region_1' as the key contains the reserved prefix 'triton_python_backend_shm_region_'")
		// A symbolic link in /dev/shm is not followed.
		link := in.path + "_link"
		require.NoError(t, os.Symlink(in.path, link))
		t.Cleanup(func() { os.Remove(link) })
		requireStatus(t, register(ctx, c, "x", "/"+link[len("/dev/shm/"):], 0, 8), connect.CodeInternal, "Unable to open shared memory region: '/"+link[len("/dev/shm/"):]+"'")
		// Unregistering an unknown region succeeds, as in Triton.
		require.NoError(t, unregister(ctx, c, "never_registered"))
	})

	bad := func(mut func(*inference.ModelInferRequest)) error {
		req := simpleShmRequest("in", "out")
		mut(req)
		_, err := infer(ctx, c, req)
		return err
	}
	cases := []struct {
		name string
		mut  func(*inference.ModelInferRequest)
		code connect.Code
		msg  string
	}{
		{"unknown input region", func(r *inference.ModelInferRequest) { r.Inputs[0].Parameters = shmParams("nope", 64, 0) },
			connect.CodeNotFound, "Unable to find shared memory region: 'nope'"},
		{"unknown output region", func(r *inference.ModelInferRequest) { r.Outputs[1].Parameters = shmParams("nope", 64, 0) },
			connect.CodeNotFound, "Unable to find shared memory region: 'nope'"},
		{"offset past the end", func(r *inference.ModelInferRequest) { r.Inputs[1].Parameters = shmParams("in", 64, 128) },
			connect.CodeInvalidArgument, "Invalid offset for shared memory region: 'in'"},
		{"negative offset", func(r *inference.ModelInferRequest) { r.Inputs[1].Parameters = shmParams("in", 64, -8) },
			connect.CodeInvalidArgument, "Invalid offset for shared memory region: 'in'"},
		{"offset plus size past the end", func(r *inference.ModelInferRequest) { r.Inputs[1].Parameters = shmParams("in", 64, 65) },
			connect.CodeInvalidArgument, "Invalid offset + byte size for shared memory region: 'in'"},
		{"negative size", func(r *inference.ModelInferRequest) { r.Inputs[0].Parameters = shmParams("in", -1, 0) },
			connect.CodeInvalidArgument, "Invalid offset + byte size for shared memory region: 'in'"},
		{"output window past the end", func(r *inference.ModelInferRequest) { r.Outputs[1].Parameters = shmParams("out", 128, 64) },
			connect.CodeInvalidArgument, "Invalid offset + byte size for shared memory region: 'out'"},
		{"input size not the tensor's", func(r *inference.ModelInferRequest) { r.Inputs[0].Parameters = shmParams("in", 60, 0) },
			connect.CodeInvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"},
		{"output window too small", func(r *inference.ModelInferRequest) { r.Outputs[0].Parameters = shmParams("out", 32, 0) },
			connect.CodeInternal, "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results"},
		{"byte size missing", func(r *inference.ModelInferRequest) { delete(r.Inputs[0].Parameters, "shared_memory_byte_size") },
			connect.CodeInvalidArgument, "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'"},
		{"offset without region", func(r *inference.ModelInferRequest) {
			r.Inputs[0].Parameters = map[string]*inference.InferParameter{"shared_memory_offset": int64Param(0)}
		}, connect.CodeInvalidArgument, "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'"},
		{"region not a string", func(r *inference.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_region"] = int64Param(1) },
			connect.CodeInvalidArgument, "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected string_param."},
		{"size not int64", func(r *inference.ModelInferRequest) {
			r.Inputs[0].Parameters["shared_memory_byte_size"] = strParam("64")
		},
			connect.CodeInvalidArgument, "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param."},
		{"contents too", func(r *inference.ModelInferRequest) {
			r.Inputs[0].Contents = &inference.InferTensorContents{IntContents: seq(16, func(int) int32 { return 0 })}
		}, connect.CodeInvalidArgument, "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' for model 'simple'"},
		{"classification too", func(r *inference.ModelInferRequest) { r.Outputs[0].Parameters["classification"] = int64Param(1) },
			connect.CodeInvalidArgument, "output can't set both 'shared_memory_region' and 'classification'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { requireStatus(t, bad(tc.mut), tc.code, tc.msg) })
	}
	require.NoError(t, unregister(ctx, c, ""))
	mapped := srv.Gateway.SharedMemory().Mapped()
	assert.Zero(t, mapped, "no mapping outlives its region, failed requests included")
}

func TestSharedMemoryCUDARefused(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	for _, c := range clients(t, srv)[:2] {
		_, err := call[inference.CudaSharedMemoryRegisterRequest, inference.CudaSharedMemoryRegisterResponse](ctx, c, "CudaSharedMemoryRegister", &inference.CudaSharedMemoryRegisterRequest{Name: "g", ByteSize: 8})
		require.Equal(t, connect.CodeUnimplemented, codeOf(err))
		assert.Contains(t, messageOf(err), "no GPU support")
		st, err := call[inference.CudaSharedMemoryStatusRequest, inference.CudaSharedMemoryStatusResponse](ctx, c, "CudaSharedMemoryStatus", &inference.CudaSharedMemoryStatusRequest{})
		require.NoError(t, err)
		assert.Empty(t, st.Regions)
	}
}

func TestSharedMemoryOff(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{DisableSystemSharedMemory: true})
	ctx := context.Background()
	c := clients(t, srv)[0]
	md, err := call[inference.ServerMetadataRequest, inference.ServerMetadataResponse](ctx, c, "ServerMetadata", &inference.ServerMetadataRequest{})
	require.NoError(t, err)
	assert.NotContains(t, md.Extensions, "system_shared_memory")
	in := newClientRegion(t, 8)
	requireStatus(t, register(ctx, c, "in", in.key, 0, 8), connect.CodeUnimplemented,
		"infergate does not implement the system_shared_memory extension; ServerMetadata lists the extensions it does")
	_, err = infer(ctx, c, simpleShmRequest("in", "out"))
	requireStatus(t, err, connect.CodeUnimplemented,
		"infergate does not implement the system_shared_memory extension; ServerMetadata lists the extensions it does")
	r := restPeers(srv)[0].get(t, "/v2/systemsharedmemory/status")
	requireRESTError(t, r, http.StatusNotImplemented, "infergate does not implement the system_shared_memory extension; ServerMetadata lists the extensions it does")
}

// A client that shrinks its object after registering it gets an error, not a crashed server.
func TestSharedMemoryTruncatedObject(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	in, out := newClientRegion(t, 128), newClientRegion(t, 128)
	require.NoError(t, register(ctx, c, "in", in.key, 0, 128))
	require.NoError(t, register(ctx, c, "out", out.key, 0, 128))
	require.NoError(t, os.Truncate(in.path, 0))
	_, err := infer(ctx, c, simpleShmRequest("in", "out"))
	requireStatus(t, err, connect.CodeInternal, "shared memory region 'in' could not be accessed: its object shrank below the registered size")
	require.NoError(t, os.Truncate(in.path, 128))
	require.NoError(t, os.Truncate(out.path, 0))
	_, err = infer(ctx, c, simpleShmRequest("in", "out"))
	requireStatus(t, err, connect.CodeInternal, "shared memory region 'out' could not be accessed: its object shrank below the registered size")
}

// An object unlinked after registration stays readable through its mapping; one unlinked
// before cannot be registered.
func TestSharedMemoryUnlinkedObject(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	in, out := newClientRegion(t, 128), newClientRegion(t, 128)
	copy(in.mem, tensor.Bytes(seq(32, func(int) int32 { return 2 })))
	require.NoError(t, register(ctx, c, "in", in.key, 0, 128))
	require.NoError(t, register(ctx, c, "out", out.key, 0, 128))
	require.NoError(t, os.Remove(in.path))
	_, err := infer(ctx, c, simpleShmRequest("in", "out"))
	require.NoError(t, err)
	assert.Equal(t, seq(16, func(int) int32 { return 4 }), int32s(out.mem[:64]))
	require.NoError(t, unregister(ctx, c, "in"))
	requireStatus(t, register(ctx, c, "in", in.key, 0, 128), connect.CodeInternal, "Unable to open shared memory region: '"+in.key+"'")
}

// simple_grpc_shm_string_client: BYTES tensors in Triton's serialized layout (a 4-byte
// little-endian length before each element) in shared memory, through simple_string.
func TestSharedMemoryStringsGRPC(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	serialize := func(vals []int32) []byte {
		var b []byte
		for _, v := range vals {
			s := strconv.Itoa(int(v))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b
	}
	in0 := serialize(seq(16, func(i int) int32 { return int32(i) }))
	in1 := serialize(seq(16, func(int) int32 { return 1 }))
	sum := serialize(seq(16, func(i int) int32 { return int32(i + 1) }))
	diff := serialize(seq(16, func(i int) int32 { return int32(i - 1) }))
	regions := map[string]*clientRegion{}
	for name, size := range map[string]int{"input0_data": len(in0), "input1_data": len(in1), "output0_data": len(sum), "output1_data": len(diff)} {
		regions[name] = newClientRegion(t, size)
		require.NoError(t, register(ctx, c, name, regions[name].key, 0, uint64(size)))
	}
	copy(regions["input0_data"].mem, in0)
	copy(regions["input1_data"].mem, in1)
	req := &inference.ModelInferRequest{
		ModelName: "simple_string",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 16}, Parameters: shmParams("input0_data", int64(len(in0)), 0)},
			{Name: "INPUT1", Datatype: "BYTES", Shape: []int64{1, 16}, Parameters: shmParams("input1_data", int64(len(in1)), 0)},
		},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{
			{Name: "OUTPUT0", Parameters: shmParams("output0_data", int64(len(sum)), 0)},
			{Name: "OUTPUT1", Parameters: shmParams("output1_data", int64(len(diff)), 0)},
		},
	}
	resp, err := infer(ctx, c, req)
	require.NoError(t, err)
	assert.Equal(t, "BYTES", resp.Outputs[0].Datatype)
	assert.Equal(t, sum, regions["output0_data"].mem)
	assert.Equal(t, diff, regions["output1_data"].mem)

	// A window one byte short of the serialized result is refused with Triton's message.
	short := newClientRegion(t, len(sum)-1)
	require.NoError(t, register(ctx, c, "short", short.key, 0, uint64(len(sum)-1)))
	req.Outputs[0].Parameters = shmParams("short", int64(len(sum)-1), 0)
	_, err = infer(ctx, c, req)
	requireStatus(t, err, connect.CodeInternal, fmt.Sprintf("shared memory size specified with the request for output 'OUTPUT0' (%d bytes) should be at least %d bytes to hold the results", len(sum)-1, len(sum)))
}

// Unregistering while requests use a region is safe: the mapping stays until they finish, and
// none is left behind.
func TestSharedMemoryConcurrentUnregister(t *testing.T) {
	t.Parallel()
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	in := newClientRegion(t, 128)
	copy(in.mem, tensor.Bytes(seq(32, func(int) int32 { return 3 })))
	n := 200
	if testing.Short() {
		n = 40
	}
	var wg sync.WaitGroup
	for i := range n {
		out := newClientRegion(t, 128)
		name := fmt.Sprintf("out%d", i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = register(ctx, c, "in", in.key, 0, 128) // the first wins; the rest are refused
			if err := register(ctx, c, name, out.key, 0, 128); err != nil {
				t.Error(err)
				return
			}
			_, err := infer(ctx, c, simpleShmRequest("in", name))
			if err == nil {
				if got := int32s(out.mem[:64]); got[0] != 6 {
					t.Errorf("sum %v", got)
				}
			} else if codeOf(err) != connect.CodeNotFound {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			_ = unregister(ctx, c, name)
			_ = unregister(ctx, c, "in")
		}()
	}
	wg.Wait()
	require.NoError(t, unregister(ctx, c, ""))
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
}

// heldModel is OUT = IN + 1 over INT32 [16] that signals entered and then waits for release
// before answering: a request held inside its model.
type heldModel struct {
	entered, release chan struct{}
}

func (heldModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "held",
		Input:  []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}}},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}}}}
}

func (m heldModel) Execute(ctx context.Context, r *engines.Request, send func(*engines.Response) error) error {
	m.entered <- struct{}{}
	<-m.release
	out := make([]byte, len(r.Inputs[0].Data))
	for i := 0; i+4 <= len(out); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(r.Inputs[0].Data[i:])+1)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{16}, Data: out}}})
}

// Unregistering the regions a request is using, while it is held in its model, keeps their
// mappings until it ends (as Triton does): the request reads its input and writes its output as
// if nothing happened, the names are gone at once for everyone else, and nothing stays mapped
// afterwards. Over gRPC and REST alike.
func TestSharedMemoryUnregisterDuringRequest(t *testing.T) {
	t.Parallel()
	m := heldModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv := start(t, m)
	ctx := context.Background()
	c := clients(t, srv)[0]
	sum := seq(16, func(i int) int32 { return int32(7*i + 1) })
	for _, via := range []string{"grpc", "rest"} {
		in, out := newClientRegion(t, 64), newClientRegion(t, 64)
		copy(in.mem, tensor.Bytes(seq(16, func(i int) int32 { return int32(7 * i) })))
		require.NoError(t, register(ctx, c, "in", in.key, 0, 64))
		require.NoError(t, register(ctx, c, "out", out.key, 0, 64))
		done := make(chan error, 1)
		go func() {
			if via == "rest" {
				// Not restPeer.post: it fails the test from this goroutine.
				res, err := http.Post(srv.URL+"/v2/models/held/infer", "application/json", strings.NewReader(
					`{"inputs":[{"name":"IN","shape":[16],"datatype":"INT32",`+
						`"parameters":{"shared_memory_region":"in","shared_memory_byte_size":64}}],`+
						`"outputs":[{"name":"OUT","parameters":{"shared_memory_region":"out","shared_memory_byte_size":64}}]}`))
				if err == nil {
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("%d %s", res.StatusCode, body)
					}
				}
				done <- err
				return
			}
			_, err := infer(ctx, c, &inference.ModelInferRequest{ModelName: "held",
				Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{16}, Parameters: shmParams("in", 64, 0)}},
				Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: shmParams("out", 64, 0)}}})
			done <- err
		}()
		select {
		case <-m.entered:
		case err := <-done:
			t.Fatalf("%s: the request ended before reaching its model: %v", via, err)
		}
		require.NoError(t, unregister(ctx, c, "out"), via)
		require.NoError(t, unregister(ctx, c, "in"), via)
		assert.Equal(t, 1, srv.Gateway.SharedMemory().Mapped(), "%s: the output's mapping stays while the request holds it (the input was copied out already)", via)
		_, err := call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{Name: "out"})
		requireStatus(t, err, connect.CodeNotFound, "Unable to find system shared memory region: 'out'")
		m.release <- struct{}{}
		require.NoError(t, <-done, via)
		assert.Equal(t, sum, int32s(out.mem), "%s: the output reached the unregistered region", via)
		assert.Zero(t, srv.Gateway.SharedMemory().Mapped(), "%s: unmapped once the request ended", via)
	}
}

// ownerKey carries a test caller's name in a context, as the runtime's API key does.
type ownerKey struct{}

func asOwner(name string) context.Context {
	return context.WithValue(context.Background(), ownerKey{}, name)
}

// With an owner function (API keys on) objects are owned: alice's request, held in its model
// after alice unregistered its regions, still owns the object its output goes to, so bob cannot
// register that object (he gets the missing object's answer) until the request has written its
// output and ended; then he may.
func TestSharedMemoryObjectOwnedWhileInFlight(t *testing.T) {
	t.Parallel()
	m := heldModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	reg := engines.NewRegistry()
	_, err := reg.Register(m)
	require.NoError(t, err)
	s := kserve.NewService(reg, kserve.WithSharedMemoryOwner(func(ctx context.Context) string { return ctx.Value(ownerKey{}).(string) }))
	t.Cleanup(func() { _ = s.Close() })
	alice, bob := asOwner("alice"), asOwner("bob")
	in, out := newClientRegion(t, 64), newClientRegion(t, 64)
	copy(in.mem, tensor.Bytes(seq(16, func(i int) int32 { return int32(7 * i) })))
	registerAs := func(ctx context.Context, name, key string) error {
		_, err := s.SystemSharedMemoryRegister(ctx, &inference.SystemSharedMemoryRegisterRequest{Name: name, Key: key, ByteSize: 64})
		return err
	}
	require.NoError(t, registerAs(alice, "in", in.key))
	require.NoError(t, registerAs(alice, "out", out.key))
	requireStatus(t, registerAs(bob, "out", out.key), connect.CodeInternal, "Unable to open shared memory region: '"+out.key+"'")

	done := make(chan error, 1)
	go func() {
		_, err := s.ModelInfer(alice, &inference.ModelInferRequest{ModelName: "held",
			Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{16}, Parameters: shmParams("in", 64, 0)}},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: shmParams("out", 64, 0)}}})
		done <- err
	}()
	select {
	case <-m.entered:
	case err := <-done:
		t.Fatalf("the request ended before reaching its model: %v", err)
	}
	_, err = s.SystemSharedMemoryUnregister(alice, &inference.SystemSharedMemoryUnregisterRequest{})
	require.NoError(t, err)
	require.NoError(t, registerAs(bob, "in", in.key), "the input was copied out: that object is free")
	requireStatus(t, registerAs(bob, "out", out.key), connect.CodeInternal, "Unable to open shared memory region: '"+out.key+"'")
	m.release <- struct{}{}
	require.NoError(t, <-done)
	assert.Equal(t, seq(16, func(i int) int32 { return int32(7*i + 1) }), int32s(out.mem), "alice's output reached her unregistered region")
	require.NoError(t, registerAs(bob, "out", out.key), "free once alice's request ended")
	assert.Equal(t, 2, s.SharedMemory().Mapped(), "bob's two regions")
}
