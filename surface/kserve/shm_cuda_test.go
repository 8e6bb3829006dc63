//go:build linux

package kserve_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeGPU stands in for the GPU engine's opener: device allocations a "client process" exported,
// by handle, each opening a mapping that copies into and out of the allocation and counts closes.
type fakeGPU struct {
	mu     sync.Mutex
	allocs map[string][]byte
	opened []*fakeDeviceMemory
}

type fakeDeviceMemory struct {
	gpu    *fakeGPU
	mem    []byte
	closes int
}

const fakeHandleLen = 64

func newFakeGPU() *fakeGPU { return &fakeGPU{allocs: map[string][]byte{}} }

// alloc exports size bytes of "device memory": its handle, and the memory the client sees.
func (g *fakeGPU) alloc(size int) ([]byte, []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := make([]byte, fakeHandleLen)
	copy(h, fmt.Sprintf("ipc-handle-%d", len(g.allocs)))
	mem := make([]byte, size)
	g.allocs[string(h)] = mem
	return h, mem
}

func (g *fakeGPU) open(device int64, handle []byte, size uint64) (shm.DeviceMemory, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(handle) != fakeHandleLen {
		return nil, fmt.Errorf("cuda: an IPC handle is %d bytes, not %d", fakeHandleLen, len(handle))
	}
	mem, ok := g.allocs[string(handle)]
	if !ok || device != 0 {
		return nil, errors.New("cuda: cuIpcOpenMemHandle: invalid argument (CUDA_ERROR_INVALID_VALUE)")
	}
	if size > uint64(len(mem)) {
		return nil, fmt.Errorf("cuda: the allocation holds %d bytes, not %d", len(mem), size)
	}
	d := &fakeDeviceMemory{gpu: g, mem: mem[:size]}
	g.opened = append(g.opened, d)
	return d, nil
}

// counts is how many mappings were opened and closed; none closes twice.
func (g *fakeGPU) counts(t *testing.T) (opened, closed int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.opened {
		assert.LessOrEqual(t, d.closes, 1, "closed twice")
		closed += d.closes
	}
	return len(g.opened), closed
}

func (d *fakeDeviceMemory) ReadAt(p []byte, off int64) error {
	d.gpu.mu.Lock()
	defer d.gpu.mu.Unlock()
	if d.closes > 0 || off < 0 || off+int64(len(p)) > int64(len(d.mem)) {
		return fmt.Errorf("bad read [%d, %d) of %d bytes, closed %d", off, off+int64(len(p)), len(d.mem), d.closes)
	}
	copy(p, d.mem[off:])
	return nil
}

func (d *fakeDeviceMemory) WriteAt(p []byte, off int64) error {
	d.gpu.mu.Lock()
	defer d.gpu.mu.Unlock()
	if d.closes > 0 || off < 0 || off+int64(len(p)) > int64(len(d.mem)) {
		return fmt.Errorf("bad write [%d, %d) of %d bytes, closed %d", off, off+int64(len(p)), len(d.mem), d.closes)
	}
	copy(d.mem[off:], p)
	return nil
}

func (d *fakeDeviceMemory) Close() error {
	d.gpu.mu.Lock()
	defer d.gpu.mu.Unlock()
	d.closes++
	return nil
}

func startCUDA(t *testing.T, gpu *fakeGPU) *gatewaytest.Server {
	return gatewaytest.Start(t, gateway.Config{CUDASharedMemory: gpu.open})
}

func registerCUDA(ctx context.Context, c *client, name string, handle []byte, device int64, size uint64) error {
	_, err := call[inference.CudaSharedMemoryRegisterRequest, inference.CudaSharedMemoryRegisterResponse](ctx, c, "CudaSharedMemoryRegister",
		&inference.CudaSharedMemoryRegisterRequest{Name: name, RawHandle: handle, DeviceId: device, ByteSize: size})
	return err
}

func unregisterCUDA(ctx context.Context, c *client, name string) error {
	_, err := call[inference.CudaSharedMemoryUnregisterRequest, inference.CudaSharedMemoryUnregisterResponse](ctx, c, "CudaSharedMemoryUnregister",
		&inference.CudaSharedMemoryUnregisterRequest{Name: name})
	return err
}

func cudaStatus(ctx context.Context, c *client, name string) (map[string]*inference.CudaSharedMemoryStatusResponse_RegionStatus, error) {
	st, err := call[inference.CudaSharedMemoryStatusRequest, inference.CudaSharedMemoryStatusResponse](ctx, c, "CudaSharedMemoryStatus",
		&inference.CudaSharedMemoryStatusRequest{Name: name})
	if err != nil {
		return nil, err
	}
	return st.Regions, nil
}

// simple_grpc_cudashm_client: both inputs in one CUDA region, both outputs in another, over every
// client; the outputs land in the device memory and the response carries none.
func TestCUDASharedMemorySimpleGRPC(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	srv := startCUDA(t, gpu)
	ctx := context.Background()
	for i, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			md, err := call[inference.ServerMetadataRequest, inference.ServerMetadataResponse](ctx, c, "ServerMetadata", &inference.ServerMetadataRequest{})
			require.NoError(t, err)
			assert.Equal(t, append(extensionsWithShm(), "cuda_shared_memory"), md.Extensions)

			inH, in := gpu.alloc(128)
			outH, out := gpu.alloc(128)
			copy(in, tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })))
			copy(in[64:], tensor.Bytes(seq(16, func(int) int32 { return 1 })))
			inName, outName := fmt.Sprintf("input_data_%d", i), fmt.Sprintf("output_data_%d", i)

			require.NoError(t, unregisterCUDA(ctx, c, inName))
			require.NoError(t, registerCUDA(ctx, c, inName, inH, 0, 128))
			require.NoError(t, registerCUDA(ctx, c, outName, outH, 0, 128))
			resp, err := infer(ctx, c, simpleShmRequest(inName, outName))
			require.NoError(t, err)
			require.Len(t, resp.Outputs, 2)
			assert.Equal(t, []int64{1, 16}, resp.Outputs[0].Shape)
			assert.Equal(t, [][]byte{{}, {}}, resp.RawOutputContents, "outputs in shared memory travel empty, as from Triton")
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i + 1) }), int32s(out[:64]))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i - 1) }), int32s(out[64:]))

			regions, err := cudaStatus(ctx, c, inName)
			require.NoError(t, err)
			require.Len(t, regions, 1)
			assert.Equal(t, inName, regions[inName].GetName())
			assert.Equal(t, uint64(0), regions[inName].GetDeviceId())
			assert.Equal(t, uint64(128), regions[inName].GetByteSize())
			sys, err := call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{})
			require.NoError(t, err)
			assert.NotContains(t, sys.Regions, inName, "system status lists no CUDA region")
			_, err = call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{Name: inName})
			requireStatus(t, err, connect.CodeNotFound, "The region named '"+inName+"' is registered as CUDA shared memory, not system shared memory")
			require.NoError(t, unregister(ctx, c, inName), "the system call leaves a CUDA region alone")
			_, err = cudaStatus(ctx, c, inName)
			require.NoError(t, err)

			require.NoError(t, unregisterCUDA(ctx, c, inName))
			require.NoError(t, unregisterCUDA(ctx, c, outName))
			_, err = cudaStatus(ctx, c, inName)
			requireStatus(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: '"+inName+"'")
		})
	}
	opened, closed := gpu.counts(t)
	assert.Equal(t, 2*len(clients(t, srv)), opened)
	assert.Equal(t, opened, closed)
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
}

// Register refusals, the two kinds sharing names, and a request's windows checked against a CUDA
// region as against a system one.
func TestCUDASharedMemoryErrorsGRPC(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	srv := startCUDA(t, gpu)
	ctx := context.Background()
	c := clients(t, srv)[0]
	inH, _ := gpu.alloc(128)
	outH, out := gpu.alloc(128)
	sysIn := newClientRegion(t, 128)
	copy(sysIn.mem, tensor.Bytes(seq(32, func(i int) int32 { return int32(i) })))
	require.NoError(t, register(ctx, c, "sys", sysIn.key, 0, 128))
	require.NoError(t, registerCUDA(ctx, c, "in", inH, 0, 128))
	require.NoError(t, registerCUDA(ctx, c, "out", outH, 0, 128))

	requireStatus(t, registerCUDA(ctx, c, "sys", inH, 0, 128), connect.CodeAlreadyExists, "shared memory region 'sys' already in manager")
	requireStatus(t, register(ctx, c, "in", sysIn.key, 0, 128), connect.CodeAlreadyExists, "shared memory region 'in' already in manager")
	requireStatus(t, registerCUDA(ctx, c, "in", inH, 0, 128), connect.CodeAlreadyExists, "shared memory region 'in' already in manager")
	requireStatus(t, registerCUDA(ctx, c, "x", inH, 0, 0), connect.CodeInvalidArgument, "failed to register shared memory region 'x': invalid args")
	requireStatus(t, registerCUDA(ctx, c, "x", inH[:8], 0, 8), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': cuda: an IPC handle is 64 bytes, not 8")
	requireStatus(t, registerCUDA(ctx, c, "x", inH, 1, 8), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': cuda: cuIpcOpenMemHandle: invalid argument (CUDA_ERROR_INVALID_VALUE)")
	_, err := cudaStatus(ctx, c, "sys")
	requireStatus(t, err, connect.CodeNotFound, "The region named 'sys' is registered as system shared memory, not CUDA shared memory")
	require.NoError(t, unregisterCUDA(ctx, c, "sys"), "the CUDA call leaves a system region alone")
	require.NoError(t, unregisterCUDA(ctx, c, "never_registered"))

	for _, tc := range []struct {
		name string
		mut  func(*inference.ModelInferRequest)
		code connect.Code
		msg  string
	}{
		{"offset past the end", func(r *inference.ModelInferRequest) { r.Inputs[1].Parameters = shmParams("in", 64, 128) },
			connect.CodeInvalidArgument, "Invalid offset for shared memory region: 'in'"},
		{"window past the end", func(r *inference.ModelInferRequest) { r.Outputs[1].Parameters = shmParams("out", 128, 64) },
			connect.CodeInvalidArgument, "Invalid offset + byte size for shared memory region: 'out'"},
		{"negative size", func(r *inference.ModelInferRequest) { r.Inputs[0].Parameters = shmParams("in", -1, 0) },
			connect.CodeInvalidArgument, "Invalid offset + byte size for shared memory region: 'in'"},
		{"output window too small", func(r *inference.ModelInferRequest) { r.Outputs[0].Parameters = shmParams("out", 32, 0) },
			connect.CodeInternal, "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes to hold the results"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := simpleShmRequest("in", "out")
			tc.mut(req)
			_, err := infer(ctx, c, req)
			requireStatus(t, err, tc.code, tc.msg)
		})
	}

	// A system region's input, a CUDA region's output.
	_, err = infer(ctx, c, simpleShmRequest("sys", "out"))
	require.NoError(t, err)
	assert.Equal(t, seq(16, func(i int) int32 { return int32(i + i + 16) }), int32s(out[:64]))
	assert.Equal(t, seq(16, func(int) int32 { return -16 }), int32s(out[64:]))

	require.NoError(t, unregisterCUDA(ctx, c, ""))
	regions, err := cudaStatus(ctx, c, "")
	require.NoError(t, err)
	assert.Empty(t, regions)
	st, err := call[inference.SystemSharedMemoryStatusRequest, inference.SystemSharedMemoryStatusResponse](ctx, c, "SystemSharedMemoryStatus", &inference.SystemSharedMemoryStatusRequest{})
	require.NoError(t, err)
	assert.Len(t, st.Regions, 1, "unregistering every CUDA region leaves the system one")
	require.NoError(t, unregister(ctx, c, ""))
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
	opened, closed := gpu.counts(t)
	assert.Equal(t, 2, opened)
	assert.Equal(t, 2, closed)
}

// Unregistering a CUDA region while a request is held in its model keeps its memory open until
// the request has written its output.
func TestCUDASharedMemoryUnregisterDuringRequest(t *testing.T) {
	t.Parallel()
	m := heldModel{entered: make(chan struct{}, 1), release: make(chan struct{})}
	gpu := newFakeGPU()
	srv := gatewaytest.Start(t, gateway.Config{CUDASharedMemory: gpu.open}, m)
	ctx := context.Background()
	c := clients(t, srv)[0]
	inH, in := gpu.alloc(64)
	outH, out := gpu.alloc(64)
	copy(in, tensor.Bytes(seq(16, func(i int) int32 { return int32(5 * i) })))
	require.NoError(t, registerCUDA(ctx, c, "in", inH, 0, 64))
	require.NoError(t, registerCUDA(ctx, c, "out", outH, 0, 64))
	done := make(chan error, 1)
	go func() {
		_, err := infer(ctx, c, &inference.ModelInferRequest{ModelName: "held",
			Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "IN", Datatype: "INT32", Shape: []int64{16}, Parameters: shmParams("in", 64, 0)}},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUT", Parameters: shmParams("out", 64, 0)}}})
		done <- err
	}()
	select {
	case <-m.entered:
	case err := <-done:
		t.Fatalf("the request ended before reaching its model: %v", err)
	}
	require.NoError(t, unregisterCUDA(ctx, c, ""))
	_, closed := gpu.counts(t)
	assert.Equal(t, 1, closed, "the input was copied out: closed at once; the output is held")
	assert.Equal(t, 1, srv.Gateway.SharedMemory().Mapped())
	m.release <- struct{}{}
	require.NoError(t, <-done)
	assert.Equal(t, seq(16, func(i int) int32 { return int32(5*i + 1) }), int32s(out))
	_, closed = gpu.counts(t)
	assert.Equal(t, 2, closed)
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
}

// With owners (API keys), a handle is its first registrant's: another owner is answered as for a
// handle that cannot be opened.
func TestCUDASharedMemoryOwners(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	s := kserve.NewService(engines.NewRegistry(),
		kserve.WithSharedMemoryOwner(func(ctx context.Context) string { return ctx.Value(ownerKey{}).(string) }),
		kserve.WithCUDASharedMemory(gpu.open))
	t.Cleanup(func() { _ = s.Close() })
	md, err := s.ServerMetadata(context.Background(), &inference.ServerMetadataRequest{})
	require.NoError(t, err)
	assert.Contains(t, md.Extensions, "cuda_shared_memory")
	alice, bob := asOwner("alice"), asOwner("bob")
	h, _ := gpu.alloc(64)
	registerAs := func(ctx context.Context, name string, handle []byte) error {
		_, err := s.CudaSharedMemoryRegister(ctx, &inference.CudaSharedMemoryRegisterRequest{Name: name, RawHandle: handle, ByteSize: 64})
		return err
	}
	require.NoError(t, registerAs(alice, "r", h))
	unopenable := "failed to register CUDA shared memory region 'r': failed to open CUDA IPC handle: invalid argument"
	requireStatus(t, registerAs(bob, "r", h), connect.CodeInvalidArgument, unopenable)
	requireStatus(t, registerAs(bob, "r", make([]byte, fakeHandleLen)), connect.CodeInvalidArgument, unopenable)
	st, err := s.CudaSharedMemoryStatus(bob, &inference.CudaSharedMemoryStatusRequest{})
	require.NoError(t, err)
	assert.Empty(t, st.Regions)
	st, err = s.CudaSharedMemoryStatus(alice, &inference.CudaSharedMemoryStatusRequest{})
	require.NoError(t, err)
	assert.Len(t, st.Regions, 1)
	_, err = s.CudaSharedMemoryUnregister(alice, &inference.CudaSharedMemoryUnregisterRequest{})
	require.NoError(t, err)
	require.NoError(t, registerAs(bob, "r", h), "free once alice's region went")
}

func cudaRegisterBody(handle []byte, device int64, size int) string {
	return fmt.Sprintf(`{"raw_handle":{"b64":%q},"device_id":%d,"byte_size":%d}`, base64.StdEncoding.EncodeToString(handle), device, size)
}

// simple_http_cudashm_client over both HTTP versions: register, status, infer and unregister
// routes.
func TestCUDASharedMemoryREST(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	srv := startCUDA(t, gpu)
	for i, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			inH, in := gpu.alloc(128)
			outH, out := gpu.alloc(128)
			copy(in, tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })))
			copy(in[64:], tensor.Bytes(seq(16, func(int) int32 { return 1 })))
			inName, outName := fmt.Sprintf("input_data_%d", i), fmt.Sprintf("output_data_%d", i)
			require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/unregister", "").status)
			r := p.post(t, "/v2/cudasharedmemory/region/"+outName+"/register", cudaRegisterBody(outH, 0, 128))
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			r = p.post(t, "/v2/cudasharedmemory/region/"+inName+"/register", cudaRegisterBody(inH, 0, 128))
			require.Equal(t, http.StatusOK, r.status, "%s", r)

			body := `{"inputs":[` + shmInputJSON("INPUT0", "INT32", inName, 64, 0) + `,` + shmInputJSON("INPUT1", "INT32", inName, 64, 64) +
				`],"outputs":[` + shmOutputJSON("OUTPUT0", outName, 64, 0) + `,` + shmOutputJSON("OUTPUT1", outName, 64, 64) + `]}`
			r = p.post(t, "/v2/models/simple/infer", body)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.JSONEq(t, `{"model_name":"simple","model_version":"1","outputs":[`+
				`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16]},{"name":"OUTPUT1","datatype":"INT32","shape":[1,16]}]}`, string(r.body))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i + 1) }), int32s(out[:64]))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i - 1) }), int32s(out[64:]))

			r = p.get(t, "/v2/cudasharedmemory/region/"+inName+"/status")
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.JSONEq(t, fmt.Sprintf(`[{"name":%q,"device_id":0,"byte_size":128}]`, inName), string(r.body))
			r = p.get(t, "/v2/cudasharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.JSONEq(t, fmt.Sprintf(`[{"name":%q,"device_id":0,"byte_size":128},{"name":%q,"device_id":0,"byte_size":128}]`, inName, outName), string(r.body))
			r = p.get(t, "/v2/systemsharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "[]", string(r.body), "system status lists no CUDA region")

			require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/"+inName+"/unregister", "").status)
			require.Equal(t, http.StatusOK, p.get(t, "/v2/cudasharedmemory/region/"+inName+"/status").status, "the system route leaves a CUDA region alone")
			require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/region/"+inName+"/unregister", "").status)
			requireRESTError(t, p.get(t, "/v2/cudasharedmemory/region/"+inName+"/status"), http.StatusNotFound,
				"Unable to find cuda shared memory region: '"+inName+"'")
			require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/unregister", "").status)
			r = p.get(t, "/v2/cudasharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "[]", string(r.body))
		})
	}
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
	opened, closed := gpu.counts(t)
	assert.Equal(t, 4, opened)
	assert.Equal(t, 4, closed)
}

func TestCUDASharedMemoryErrorsREST(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	srv := startCUDA(t, gpu)
	p := restPeers(srv)[0]
	h, _ := gpu.alloc(64)
	sys := newClientRegion(t, 64)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/sys/register", registerBody(sys.key, 0, 64)).status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/region/g/register", cudaRegisterBody(h, 0, 64)).status)
	reg := "/v2/cudasharedmemory/region/x/register"
	b64 := base64.StdEncoding.EncodeToString(h)
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/v2/cudasharedmemory/region/g/register", cudaRegisterBody(h, 0, 64), 400, "shared memory region 'g' already in manager"},
		{"/v2/cudasharedmemory/region/sys/register", cudaRegisterBody(h, 0, 64), 400, "shared memory region 'sys' already in manager"},
		{"/v2/systemsharedmemory/region/g/register", registerBody(sys.key, 0, 64), 400, "shared memory region 'g' already in manager"},
		{reg, ``, 400, "Shared memory register request has no 'raw_handle' field"},
		{reg, `{"device_id":0,"byte_size":8}`, 400, "Shared memory register request has no 'raw_handle' field"},
		{reg, `{"raw_handle":"` + b64 + `","device_id":0,"byte_size":8}`, 400, `Unable to parse 'raw_handle': expected an object {"b64": string}, got "` + b64[:31] + "..."},
		{reg, `{"raw_handle":{"b64":7},"device_id":0,"byte_size":8}`, 400, `Unable to parse 'raw_handle': expected an object {"b64": string}, got {"b64":7}`},
		{reg, `{"raw_handle":{},"device_id":0,"byte_size":8}`, 400, `Unable to parse 'raw_handle': expected an object {"b64": string}, got {}`},
		{reg, `{"raw_handle":{"b64":"not base64!"},"device_id":0,"byte_size":8}`, 400, "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"},
		{reg, `{"raw_handle":{"b64":"` + b64 + `"},"byte_size":8}`, 400, "Shared memory register request has no 'device_id' field"},
		{reg, `{"raw_handle":{"b64":"` + b64 + `"},"device_id":"0","byte_size":8}`, 400, `Unable to parse 'device_id': expected an integer, got "0"`},
		{reg, `{"raw_handle":{"b64":"` + b64 + `"},"device_id":0}`, 400, "Shared memory register request has no 'byte_size' field"},
		{reg, `{"raw_handle":{"b64":"` + b64 + `"},"device_id":0,"byte_size":-8}`, 400, "Unable to parse 'byte_size': expected a non-negative integer, got -8"},
		{reg, cudaRegisterBody(h, 0, 0), 400, "failed to register shared memory region 'x': invalid args"},
		{reg, cudaRegisterBody(h[:4], 0, 8), 400, "failed to register CUDA shared memory region 'x': cuda: an IPC handle is 64 bytes, not 4"},
		{reg, cudaRegisterBody(h, 0, 65), 400, "failed to register CUDA shared memory region 'x': cuda: the allocation holds 64 bytes, not 65"},
		{reg, `[`, 400, "failed to parse the shared memory register request JSON: unexpected end of JSON input (at offset 1)"},
	} {
		requireRESTError(t, p.post(t, c.path, c.body), c.status, c.msg)
	}
	requireRESTError(t, p.get(t, "/v2/cudasharedmemory/region/sys/status"), http.StatusNotFound,
		"The region named 'sys' is registered as system shared memory, not CUDA shared memory")
	requireRESTError(t, p.get(t, "/v2/systemsharedmemory/region/g/status"), http.StatusNotFound,
		"The region named 'g' is registered as CUDA shared memory, not system shared memory")
	requireRESTError(t, p.get(t, reg), http.StatusMethodNotAllowed, "Method Not Allowed")
	require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/unregister", "").status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/unregister", "").status)
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
}
