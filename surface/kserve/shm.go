package kserve

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/kserve/shm"
)

// Triton's shared memory extension (package shm holds the regions and documents the trust
// model): tensor parameters naming a registered region, and the register/unregister/status
// RPCs and routes.

// Tensor parameter keys of the shared memory extension.
const (
	paramShmRegion   = "shared_memory_region"
	paramShmOffset   = "shared_memory_offset"
	paramShmByteSize = "shared_memory_byte_size"
)

// extSystemSharedMemory and extCUDASharedMemory are the extensions' names in ServerMetadata.
const (
	extSystemSharedMemory = "system_shared_memory"
	extCUDASharedMemory   = "cuda_shared_memory"
)

// WithSystemSharedMemory turns Triton's system shared memory extension on or off (default on
// where the build supports it: Linux). Off, its RPCs and routes answer UNIMPLEMENTED and it is
// not advertised.
func WithSystemSharedMemory(on bool) Option { return func(s *Service) { s.shmOff = !on } }

// WithSharedMemoryMaxRegions caps the system shared memory regions registered at once (default
// shm.DefaultMaxRegions).
func WithSharedMemoryMaxRegions(n int) Option { return func(s *Service) { s.shmMax = n } }

// WithSharedMemoryOwner names the owner of the regions a request registers and uses (default:
// one namespace for every caller, as in Triton). The runtime passes the caller's API key, so that
// with keys on one client's regions are never reached through another's requests. With an owner
// function the objects are owned too (shm.ExclusiveObjects): a /dev/shm object belongs to the
// owner that registered it first while any of that owner's regions maps it, and another owner
// naming it is answered as for a missing object.
func WithSharedMemoryOwner(owner func(context.Context) string) Option {
	return func(s *Service) { s.shmOwner = owner }
}

// shmScope is one request's reach into the shared memory regions: the manager (nil when the
// extension is off) and the namespace of the request's caller.
type shmScope struct {
	m     *shm.Manager
	owner string
}

// shmScope is the scope of ctx's caller.
func (s *Service) shmScope(ctx context.Context) shmScope {
	if s.shm == nil {
		return shmScope{}
	}
	sc := shmScope{m: s.shm}
	if s.shmOwner != nil {
		sc.owner = s.shmOwner(ctx)
	}
	return sc
}

// SharedMemory is the service's region manager, nil when the extension is off.
func (s *Service) SharedMemory() *shm.Manager { return s.shm }

// Close unregisters every shared memory region; mappings still in use by in-flight requests
// go when those finish.
func (s *Service) Close() error {
	if s.shm == nil {
		return nil
	}
	return s.shm.Close()
}

// shmParams are a tensor's shared memory parameters.
type shmParams struct {
	region       string
	offset, size int64
	hasShm       bool
}

// parseShmParams reads a tensor's shared memory parameters with Triton's rules and messages:
// the region is a string, offset (default 0) and byte size int64, the byte size required with a
// region and neither allowed without one.
func parseShmParams(tensorName string, params map[string]*inference.InferParameter) (shmParams, error) {
	var p shmParams
	if len(params) == 0 {
		return p, nil
	}
	if v, ok := params[paramShmRegion]; ok {
		s, isStr := v.GetParameterChoice().(*inference.InferParameter_StringParam)
		if !isStr {
			return p, invalid("invalid value type for 'shared_memory_region' parameter for tensor '%s', expected string_param.", tensorName)
		}
		p.region, p.hasShm = s.StringParam, true
	}
	for _, k := range [...]string{paramShmOffset, paramShmByteSize} {
		v, ok := params[k]
		if !ok {
			continue
		}
		if !p.hasShm {
			return p, invalid("'%s' can not be specified without 'shared_memory_region' parameter for tensor '%s'", k, tensorName)
		}
		n, isInt := v.GetParameterChoice().(*inference.InferParameter_Int64Param)
		if !isInt {
			return p, invalid("invalid value type for '%s' parameter for tensor '%s', expected int64_param.", k, tensorName)
		}
		if k == paramShmOffset {
			p.offset = n.Int64Param
		} else {
			p.size = n.Int64Param
		}
	}
	if p.hasShm {
		if _, ok := params[paramShmByteSize]; !ok {
			return p, invalid("'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '%s'", tensorName)
		}
	}
	return p, nil
}

// releaseShm lets go of the regions a request's outputs hold.
func (o *callOptions) releaseShm() {
	for _, v := range o.shmOut {
		v.Release()
	}
	for _, v := range o.shmIn {
		v.Release()
	}
	o.shmOut, o.shmIn = nil, nil
}

// writeShmOutput copies output i of a response into the region its request named and leaves
// the output's raw contents empty, as Triton does.
func writeShmOutput(v *shm.View, name string, data []byte) error {
	if len(data) > v.Len() {
		return connect.NewError(connect.CodeInternal,
			fmt.Errorf("shared memory size specified with the request for output '%s' (%d bytes) should be at least %d bytes to hold the results", name, v.Len(), len(data)))
	}
	return v.Write(data)
}

func (s *Service) shmDisabled() error {
	return unimplemented(extSystemSharedMemory)
}

func (s *Service) SystemSharedMemoryStatus(ctx context.Context, req *inference.SystemSharedMemoryStatusRequest) (*inference.SystemSharedMemoryStatusResponse, error) {
	if s.shm == nil {
		return nil, s.shmDisabled()
	}
	st, err := s.shm.Status(s.shmScope(ctx).owner, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &inference.SystemSharedMemoryStatusResponse{Regions: make(map[string]*inference.SystemSharedMemoryStatusResponse_RegionStatus, len(st))}
	for _, r := range st {
		resp.Regions[r.Name] = &inference.SystemSharedMemoryStatusResponse_RegionStatus{Name: r.Name, Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}
	}
	return resp, nil
}

func (s *Service) SystemSharedMemoryRegister(ctx context.Context, req *inference.SystemSharedMemoryRegisterRequest) (*inference.SystemSharedMemoryRegisterResponse, error) {
	if s.shm == nil {
		return nil, s.shmDisabled()
	}
	if err := s.shm.Register(s.shmScope(ctx).owner, req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize()); err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryRegisterResponse{}, nil
}

func (s *Service) SystemSharedMemoryUnregister(ctx context.Context, req *inference.SystemSharedMemoryUnregisterRequest) (*inference.SystemSharedMemoryUnregisterResponse, error) {
	if s.shm == nil {
		return nil, s.shmDisabled()
	}
	owner := s.shmScope(ctx).owner
	var err error
	if req.GetName() == "" {
		err = s.shm.UnregisterAll(owner)
	} else {
		err = s.shm.Unregister(owner, req.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &inference.SystemSharedMemoryUnregisterResponse{}, nil
}

// errNoCUDA refuses CUDA shared memory: this build has no GPU support.
var errNoCUDA = errors.New("infergate does not implement the cuda_shared_memory extension: this build has no GPU support, so CUDA IPC handles cannot be opened; use system shared memory")

// cudaOn reports whether CUDA shared memory regions can be registered: the shared memory
// extension is on and the service opens CUDA IPC handles (WithCUDASharedMemory).
func (s *Service) cudaOn() bool { return s.shm != nil && s.shm.CUDA() }

// CudaSharedMemoryRegister opens a client's CUDA IPC handle as a region (package shm), when the
// service has a GPU engine to open it (WithCUDASharedMemory); without one it is refused, and
// Status and Unregister answer as a GPU-less Triton does (no regions; unregistering none
// succeeds), because Triton's example clients unregister CUDA regions before they start whether
// or not they use them.
func (s *Service) CudaSharedMemoryRegister(ctx context.Context, req *inference.CudaSharedMemoryRegisterRequest) (*inference.CudaSharedMemoryRegisterResponse, error) {
	if !s.cudaOn() {
		return nil, connect.NewError(connect.CodeUnimplemented, errNoCUDA)
	}
	if err := s.shm.RegisterCUDA(s.shmScope(ctx).owner, req.GetName(), req.GetRawHandle(), req.GetDeviceId(), req.GetByteSize()); err != nil {
		return nil, err
	}
	return &inference.CudaSharedMemoryRegisterResponse{}, nil
}

// CudaSharedMemoryStatus lists the caller's CUDA regions: none without a GPU engine.
func (s *Service) CudaSharedMemoryStatus(ctx context.Context, req *inference.CudaSharedMemoryStatusRequest) (*inference.CudaSharedMemoryStatusResponse, error) {
	if s.shm == nil {
		return nil, unimplemented(extCUDASharedMemory)
	}
	st, err := s.shm.CUDAStatus(s.shmScope(ctx).owner, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &inference.CudaSharedMemoryStatusResponse{Regions: make(map[string]*inference.CudaSharedMemoryStatusResponse_RegionStatus, len(st))}
	for _, r := range st {
		resp.Regions[r.Name] = &inference.CudaSharedMemoryStatusResponse_RegionStatus{Name: r.Name, DeviceId: uint64(r.DeviceID), ByteSize: r.ByteSize}
	}
	return resp, nil
}

// CudaSharedMemoryUnregister removes the caller's CUDA region name, or all of them: none without
// a GPU engine.
func (s *Service) CudaSharedMemoryUnregister(ctx context.Context, req *inference.CudaSharedMemoryUnregisterRequest) (*inference.CudaSharedMemoryUnregisterResponse, error) {
	if s.shm == nil {
		return nil, unimplemented(extCUDASharedMemory)
	}
	owner := s.shmScope(ctx).owner
	var err error
	if req.GetName() == "" {
		err = s.shm.UnregisterAllCUDA(owner)
	} else {
		err = s.shm.UnregisterCUDA(owner, req.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &inference.CudaSharedMemoryUnregisterResponse{}, nil
}

// REST: /v2/systemsharedmemory[/region/{region}]/status|register|unregister and the same under
// cudasharedmemory.

func (s *Service) mountSharedMemory(get, post func(string, restFunc)) {
	for _, base := range []string{"/v2/systemsharedmemory", "/v2/systemsharedmemory/region/{region}"} {
		get(base+"/status", s.restShmStatus)
		post(base+"/unregister", s.restShmUnregister)
	}
	post("/v2/systemsharedmemory/region/{region}/register", s.restShmRegister)
	for _, base := range []string{"/v2/cudasharedmemory", "/v2/cudasharedmemory/region/{region}"} {
		get(base+"/status", s.restCudaStatus)
		post(base+"/unregister", s.restCudaUnregister)
	}
	post("/v2/cudasharedmemory/region/{region}/register", s.restCudaRegister)
}

// shmRESTError gives shared memory errors Triton's HTTP statuses: ALREADY_EXISTS is a 400 there.
func shmRESTError(err error) error {
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		return &restError{status: http.StatusBadRequest, msg: asStatus(err).Message()}
	}
	return err
}

func (s *Service) restShmStatus(w http.ResponseWriter, r *http.Request) error {
	if s.shm == nil {
		return s.shmDisabled()
	}
	st, err := s.shm.Status(s.shmScope(r.Context()).owner, r.PathValue("region"))
	if err != nil {
		return err
	}
	b := []byte{'['}
	for i, x := range st {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = tensor.AppendJSONString(b, x.Name)
		b = append(b, `,"key":`...)
		b = tensor.AppendJSONString(b, x.Key)
		b = append(b, `,"offset":`...)
		b = strconv.AppendUint(b, x.Offset, 10)
		b = append(b, `,"byte_size":`...)
		b = strconv.AppendUint(b, x.ByteSize, 10)
		b = append(b, '}')
	}
	writeJSON(w, http.StatusOK, append(b, ']'))
	return nil
}

// maxShmRegisterBody bounds a register request's body: three small fields.
const maxShmRegisterBody = 64 << 10

func (s *Service) restShmRegister(w http.ResponseWriter, r *http.Request) error {
	if s.shm == nil {
		return s.shmDisabled()
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxShmRegisterBody)
	body, err := s.readBody(w, r, 0)
	if err != nil {
		return err
	}
	key, offset, size, err := parseShmRegisterBody(body)
	if err != nil {
		return err
	}
	if err := s.shm.Register(s.shmScope(r.Context()).owner, r.PathValue("region"), key, offset, size); err != nil {
		return shmRESTError(err)
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

func (s *Service) restShmUnregister(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.SystemSharedMemoryUnregister(r.Context(), &inference.SystemSharedMemoryUnregisterRequest{Name: r.PathValue("region")}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

// restCudaStatus answers Triton's JSON: [{"name", "device_id", "byte_size"}], sorted by name.
func (s *Service) restCudaStatus(w http.ResponseWriter, r *http.Request) error {
	if s.shm == nil {
		return unimplemented(extCUDASharedMemory)
	}
	st, err := s.shm.CUDAStatus(s.shmScope(r.Context()).owner, r.PathValue("region"))
	if err != nil {
		return err
	}
	b := []byte{'['}
	for i, x := range st {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = tensor.AppendJSONString(b, x.Name)
		b = append(b, `,"device_id":`...)
		b = strconv.AppendInt(b, x.DeviceID, 10)
		b = append(b, `,"byte_size":`...)
		b = strconv.AppendUint(b, x.ByteSize, 10)
		b = append(b, '}')
	}
	writeJSON(w, http.StatusOK, append(b, ']'))
	return nil
}

func (s *Service) restCudaRegister(w http.ResponseWriter, r *http.Request) error {
	if !s.cudaOn() {
		return connect.NewError(connect.CodeUnimplemented, errNoCUDA)
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxShmRegisterBody)
	body, err := s.readBody(w, r, 0)
	if err != nil {
		return err
	}
	handle, device, size, err := parseCudaShmRegisterBody(body)
	if err != nil {
		return err
	}
	if err := s.shm.RegisterCUDA(s.shmScope(r.Context()).owner, r.PathValue("region"), handle, device, size); err != nil {
		return shmRESTError(err)
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

func (s *Service) restCudaUnregister(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.CudaSharedMemoryUnregister(r.Context(), &inference.CudaSharedMemoryUnregisterRequest{Name: r.PathValue("region")}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nil)
	return nil
}

// parseShmRegisterBody reads a register request: {"key": string, "offset": uint (optional),
// "byte_size": uint}, with Triton's messages for missing fields.
func parseShmRegisterBody(body []byte) (key string, offset, size uint64, err error) {
	var j struct {
		Key      jsonValue `json:"key"`
		Offset   jsonValue `json:"offset"`
		ByteSize jsonValue `json:"byte_size"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &j); err != nil {
			return "", 0, 0, jsonSyntaxError("the shared memory register request JSON", err)
		}
	}
	if j.Key == nil {
		return "", 0, 0, invalid("Shared memory register request has no 'key' field")
	}
	if j.Key[0] != '"' || json.Unmarshal(j.Key, &key) != nil {
		return "", 0, 0, invalid("Unable to parse 'key': expected a string, got %s", clip(j.Key))
	}
	if j.Offset != nil {
		if offset, err = strconv.ParseUint(string(j.Offset), 10, 64); err != nil {
			return "", 0, 0, invalid("Unable to parse 'offset': expected a non-negative integer, got %s", clip(j.Offset))
		}
	}
	if j.ByteSize == nil {
		return "", 0, 0, invalid("Shared memory register request has no 'byte_size' field")
	}
	if size, err = strconv.ParseUint(string(j.ByteSize), 10, 64); err != nil {
		return "", 0, 0, invalid("Unable to parse 'byte_size': expected a non-negative integer, got %s", clip(j.ByteSize))
	}
	return key, offset, size, nil
}

// parseCudaShmRegisterBody reads a CUDA register request as Triton's HTTP client sends it:
// {"raw_handle": {"b64": base64 string}, "device_id": int, "byte_size": uint}, with Triton's
// messages for missing fields and for a handle that is not base64. The handle's length is the
// GPU engine's to check (it knows the size of a CUDA IPC handle).
func parseCudaShmRegisterBody(body []byte) (handle []byte, device int64, size uint64, err error) {
	var j struct {
		RawHandle jsonValue `json:"raw_handle"`
		DeviceID  jsonValue `json:"device_id"`
		ByteSize  jsonValue `json:"byte_size"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &j); err != nil {
			return nil, 0, 0, jsonSyntaxError("the shared memory register request JSON", err)
		}
	}
	if j.RawHandle == nil {
		return nil, 0, 0, invalid("Shared memory register request has no 'raw_handle' field")
	}
	var raw struct {
		B64 jsonValue `json:"b64"`
	}
	var b64 string
	if j.RawHandle[0] != '{' || json.Unmarshal(j.RawHandle, &raw) != nil || raw.B64 == nil || raw.B64[0] != '"' || json.Unmarshal(raw.B64, &b64) != nil {
		return nil, 0, 0, invalid(`Unable to parse 'raw_handle': expected an object {"b64": string}, got %s`, clip(j.RawHandle))
	}
	if handle, err = base64.StdEncoding.DecodeString(b64); err != nil {
		if handle, err = base64.RawStdEncoding.DecodeString(b64); err != nil {
			return nil, 0, 0, invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
		}
	}
	if j.DeviceID == nil {
		return nil, 0, 0, invalid("Shared memory register request has no 'device_id' field")
	}
	if device, err = strconv.ParseInt(string(j.DeviceID), 10, 64); err != nil {
		return nil, 0, 0, invalid("Unable to parse 'device_id': expected an integer, got %s", clip(j.DeviceID))
	}
	if j.ByteSize == nil {
		return nil, 0, 0, invalid("Shared memory register request has no 'byte_size' field")
	}
	if size, err = strconv.ParseUint(string(j.ByteSize), 10, 64); err != nil {
		return nil, 0, 0, invalid("Unable to parse 'byte_size': expected a non-negative integer, got %s", clip(j.ByteSize))
	}
	return handle, device, size, nil
}
