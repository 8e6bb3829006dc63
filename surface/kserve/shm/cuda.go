package shm

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"connectrpc.com/connect"
)

// CUDA regions: Triton's CUDA shared memory extension. A client exports device memory with
// cuIpcGetMemHandle (cudaIpcGetMemHandle) and registers the handle's raw bytes; the server opens
// it (OpenCUDA, the GPU engine's). A model on the region's GPU reads and writes tensors named in
// it in place (View.Device); for any other model they are copied between the device and the
// host: inputs out of it before the model runs, outputs into it after. CUDA regions live
// in the same per-owner namespaces as system ones (one name is one region, of either kind), count
// against the same cap, and have the same lifetime: unregistering removes the name at once, and
// the memory is closed (cuIpcCloseMemHandle) when the last request using it has finished.

// DeviceMemory is a CUDA region's memory: device memory another process exported with
// cuIpcGetMemHandle, opened in this one (the GPU engine, engines/cuda, in a build with it).
type DeviceMemory interface {
	// ReadAt copies len(p) bytes at off into p (device to host); WriteAt copies p to off.
	ReadAt(p []byte, off int64) error
	WriteAt(p []byte, off int64) error
	// Close unmaps the memory (cuIpcCloseMemHandle).
	Close() error
}

// DevicePointer is implemented by a DeviceMemory the GPU engine can compute on in place: where
// the memory is, on which GPU, in this process's address space on it.
type DevicePointer interface {
	DevicePointer() (ordinal int, ptr uintptr)
}

// Device reports where a CUDA region's window is on its GPU, when its memory says (DevicePointer):
// a GPU model then reads and writes it in place, with no copy through the host.
func (v *View) Device() (ordinal int, ptr uintptr, ok bool) {
	dp, isDev := v.dev.(DevicePointer)
	if !isDev {
		return 0, 0, false
	}
	ordinal, base := dp.DevicePointer()
	return ordinal, base + uintptr(v.off), true
}

// OpenCUDA opens the IPC handle (Triton's raw_handle bytes) of byteSize bytes on GPU device.
//
// The manager calls it with its lock held and only with 0 < byteSize <= the largest int; it never
// calls ReadAt or WriteAt past byteSize. A handle of the wrong length, or byteSize past the
// exported allocation, are the opener's to refuse. Its errors reach the client as
// INVALID_ARGUMENT "failed to register CUDA shared memory region '<name>': <err>", a
// *connect.Error as it is (with ExclusiveObjects, see RegisterCUDA, only a *connect.Error keeps
// its words).
type OpenCUDA func(device int64, handle []byte, byteSize uint64) (DeviceMemory, error)

// WithCUDA lets the manager register CUDA regions, opened by open.
func WithCUDA(open OpenCUDA) Option { return func(m *Manager) { m.open = open } }

// CUDAStatus describes one registered CUDA region, as CudaSharedMemoryStatus reports it.
type CUDAStatus struct {
	Name     string
	DeviceID int64
	ByteSize uint64
}

// CUDA reports whether the manager registers CUDA regions (WithCUDA was given).
func (m *Manager) CUDA() bool { return m.open != nil }

// errCUDAOff refuses CUDA regions in a manager without WithCUDA.
var errCUDAOff = errors.New("CUDA shared memory is not enabled on this server")

// RegisterCUDA opens the CUDA IPC handle of byteSize bytes on device as owner's region name. Names
// are shared with system regions: either kind's name already registered by owner is
// ALREADY_EXISTS, and the cap counts both kinds.
//
// With ExclusiveObjects a handle is held, by its bytes, by the first owner that registers it
// while any of its mappings lives, as objects are (see Register). The device is not part of a
// handle's identity: the handle names the exported allocation whatever device opens it (with
// peer access another device can), so another owner naming it under any device gets, without the
// opener being called, the answer a handle that cannot be opened gets. That answer must not tell
// the two apart, so in an exclusive manager every opener failure that is not a *connect.Error is
// answered with Triton's most common words for it, "failed to open CUDA IPC handle: invalid
// argument", not the opener's.
func (m *Manager) RegisterCUDA(owner, name string, handle []byte, device int64, byteSize uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open == nil {
		return connect.NewError(connect.CodeUnimplemented, errCUDAOff)
	}
	id := regionID{owner, name}
	if err := m.admitLocked(id); err != nil {
		return err
	}
	if byteSize == 0 || byteSize > maxLen {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to register shared memory region '%s': invalid args", name))
	}
	unopenable := connect.NewError(connect.CodeInvalidArgument,
		fmt.Errorf("failed to register CUDA shared memory region '%s': failed to open CUDA IPC handle: invalid argument", name))
	key := string(handle)
	if heldByOther(m.handles, key, owner) {
		return unopenable // not even opened
	}
	dev, err := m.open(device, bytes.Clone(handle), byteSize)
	if err == nil && dev == nil {
		err = errors.New("the GPU engine opened no memory")
	}
	if err != nil {
		var ce *connect.Error
		switch {
		case errors.As(err, &ce):
			return ce
		case m.exclusive:
			return unopenable
		}
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to register CUDA shared memory region '%s': %v", name, err))
	}
	m.mapped.Add(1)
	m.regions[id] = &region{m: m, size: byteSize, refs: 1, isCUDA: true, dev: dev, handle: key,
		cuda: CUDAStatus{Name: name, DeviceID: device, ByteSize: byteSize}}
	if m.exclusive {
		hold(m.handles, key, owner)
	}
	return nil
}

// CUDAStatus describes owner's CUDA region name, or every CUDA region of owner (sorted by name)
// when name is empty; system regions are Status's.
func (m *Manager) CUDAStatus(owner, name string) ([]CUDAStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name != "" {
		r, ok := m.regions[regionID{owner, name}]
		if !ok {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("Unable to find cuda shared memory region: '%s'", name))
		}
		if !r.isCUDA {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("The region named '%s' is registered as system shared memory, not CUDA shared memory", name))
		}
		return []CUDAStatus{r.cuda}, nil
	}
	out := []CUDAStatus{}
	for id, r := range m.regions {
		if id.owner == owner && r.isCUDA {
			out = append(out, r.cuda)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// UnregisterCUDA removes owner's CUDA region name; an unknown name, or a system region's, is not
// an error, as in Triton. The memory is closed when the last request using it finishes.
func (m *Manager) UnregisterCUDA(owner, name string) error {
	return m.unregister(owner, name, true)
}

// UnregisterAllCUDA removes every CUDA region of owner (its system regions stay).
func (m *Manager) UnregisterAllCUDA(owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unregisterLocked(true, func(id regionID) bool { return id.owner == owner })
}

// deviceError is a failed copy to or from a CUDA region's memory.
func (v *View) deviceError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("CUDA shared memory region '%s' could not be accessed: %v", v.name, err))
}
