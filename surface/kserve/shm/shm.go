package shm

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
)

// DefaultMaxRegions bounds the regions one server holds: each costs a mapping and a file
// descriptor's worth of kernel state while it lives.
const DefaultMaxRegions = 4096

// reservedKeyPrefix marks the objects Triton's Python backend creates for itself; Triton refuses
// to register them and so does infergate.
const reservedKeyPrefix = "triton_python_backend_shm_region_"

// maxKeyLen is NAME_MAX: the longest name /dev/shm can hold.
const maxKeyLen = 255

// Status describes one registered region, as SystemSharedMemoryStatus reports it.
type Status struct {
	Name     string
	Key      string
	Offset   uint64
	ByteSize uint64
}

// Manager holds the registered regions. Its methods are safe for concurrent use; errors are
// *connect.Error with Triton's codes and messages.
type Manager struct {
	mu      sync.Mutex
	regions map[regionID]*region
	max     int
	closed  bool
	mapped  atomic.Int64

	// exclusive: each object belongs to one owner at a time (see ExclusiveObjects). An object
	// is claimed twice, by its name under /dev/shm and by its file's identity, so that another
	// name for the same file (a hard link, a rename) is the same object. Guarded by mu.
	exclusive bool
	names     map[string]*claim
	files     map[fileID]*claim
	handles   map[string]*claim // CUDA IPC handles, by their bytes (see RegisterCUDA)

	open OpenCUDA // nil: CUDA regions are refused (see WithCUDA)
}

// fileID is a file's identity: what stays the same under any of its names.
type fileID struct{ dev, ino uint64 }

// claim is an owner's hold on an object: refs counts the owner's live mappings of it
// (registered regions, and unregistered ones that requests still use).
type claim struct {
	owner string
	refs  int
}

// Option configures a Manager.
type Option func(*Manager)

// ExclusiveObjects ties each object to the owner that registered it first, for as long as any
// region of that owner maps it (in-flight requests included: an unregistered region a request
// still writes its outputs to keeps the object its owner's until the request ends). Another
// owner naming the object, by any of its names, gets exactly the error a missing object gets,
// so it can neither read nor overwrite the owner's bytes nor learn that the object exists. The
// runtime sets it with API keys on; without it (keys off, Triton's model) any caller may register
// any object. CUDA IPC handles are held the same way (see RegisterCUDA).
func ExclusiveObjects() Option { return func(m *Manager) { m.exclusive = true } }

// regionID names a region within its owner's namespace: with API keys on, each key has its own
// (see Register), so one client's regions are never read, written, listed or unregistered through
// another's requests.
type regionID struct{ owner, name string }

// region is one registered window: a system region's mapping, or a CUDA region's device memory
// (dev non-nil). Both kinds share the owners' namespaces, the cap and the lifetime. refs counts
// its registration (while registered) and every View handed out; the mapping (or the device
// memory) is released when it drops to zero.
type region struct {
	m       *Manager
	size    uint64 // the window's size, either kind
	status  Status
	mapping []byte // what mmap returned
	data    []byte // the registered window inside it
	refs    int    // guarded by m.mu
	file    string // the object's name under /dev/shm, and
	id      fileID // its identity: the claims released with the mapping (exclusive managers)

	// A CUDA region: its status, its opened memory (nil once released) and the handle claimed
	// with it (exclusive managers).
	cuda   CUDAStatus
	dev    DeviceMemory
	isCUDA bool
	handle string
}

// New returns a manager holding at most maxRegions regions (DefaultMaxRegions when <= 0).
func New(maxRegions int, opts ...Option) *Manager {
	if maxRegions <= 0 {
		maxRegions = DefaultMaxRegions
	}
	m := &Manager{regions: make(map[regionID]*region), max: maxRegions}
	for _, o := range opts {
		o(m)
	}
	if m.exclusive {
		m.names, m.files, m.handles = make(map[string]*claim), make(map[fileID]*claim), make(map[string]*claim)
	}
	return m
}

// Supported reports whether this build can map shared memory (Linux only).
func Supported() bool { return supported }

// Mapped is the number of live mappings: registered regions plus unregistered ones still in use,
// CUDA regions' opened memory included.
func (m *Manager) Mapped() int { return int(m.mapped.Load()) }

// ValidKey reports whether key names a POSIX shared memory object the server may open, and the
// name it has under /dev/shm.
func ValidKey(key string) (string, bool) {
	name := strings.TrimPrefix(key, "/")
	if name == "" || name == "." || name == ".." || len(name) > maxKeyLen || strings.ContainsAny(name, "/\x00") {
		return "", false
	}
	return name, true
}

// Register maps [offset, offset+byteSize) of the object key as region name of owner. Owners are
// namespaces (the caller's API key; "" when keys are off): every other method finds only the
// regions its owner registered, so two clients may use one name, and neither reaches the other's
// regions. The cap on regions is the server's, across owners. With ExclusiveObjects, an object
// another owner holds answers as a missing one does.
//
// A missing object, one that is not a regular file and (exclusive) one another owner holds all
// get Triton's answer for a missing object, and before the window is checked against the
// object's size, so that no answer tells a client whether an object it may not use exists.
func (m *Manager) Register(owner, name, key string, offset, byteSize uint64) error {
	file, ok := ValidKey(key)
	if !ok {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("cannot register shared memory region '%s' - invalid shm key '%s'", name, key))
	}
	if strings.HasPrefix(file, reservedKeyPrefix) {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("cannot register shared memory region '%s' with key '%s' as the key contains the reserved prefix '%s'", name, key, reservedKeyPrefix))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := regionID{owner, name}
	if err := m.admitLocked(id); err != nil {
		return err
	}
	invalidArgs := connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to register shared memory region '%s': invalid args", name))
	// A zero-sized window cannot be mapped and could hold no tensor; an end past what an int
	// can index could not be sliced. Neither depends on the object, so says nothing about it.
	if byteSize == 0 || offset > maxLen || byteSize > maxLen-offset {
		return invalidArgs
	}
	missing := connect.NewError(connect.CodeInternal, fmt.Errorf("Unable to open shared memory region: '%s'", key))
	if heldByOther(m.names, file, owner) {
		return missing // not even opened
	}
	mapping, data, fid, err := mapObject(file, offset, byteSize, func(fid fileID) error {
		if heldByOther(m.files, fid, owner) {
			return errNotYours
		}
		return nil
	})
	switch {
	case errors.Is(err, errOpen), errors.Is(err, errStat), errors.Is(err, errNotYours):
		return missing
	case errors.Is(err, errBounds):
		return invalidArgs
	case err != nil:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to register shared memory region '%s': %w", name, err))
	}
	m.mapped.Add(1)
	m.regions[id] = &region{m: m, size: byteSize, status: Status{Name: name, Key: key, Offset: offset, ByteSize: byteSize}, mapping: mapping, data: data, refs: 1,
		file: file, id: fid}
	if m.exclusive {
		hold(m.names, file, owner)
		hold(m.files, fid, owner)
	}
	return nil
}

// admitLocked checks that region id may be registered, of either kind: the manager is open,
// the name is not the owner's already (names are shared by both kinds) and the cap, which
// counts both, is not reached.
func (m *Manager) admitLocked(id regionID) error {
	if m.closed {
		return connect.NewError(connect.CodeUnavailable, errors.New("Server is stopping"))
	}
	if _, dup := m.regions[id]; dup {
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("shared memory region '%s' already in manager", id.name))
	}
	if len(m.regions) >= m.max {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("failed to register shared memory region '%s': the server holds the most regions it allows (%d); unregister some first", id.name, m.max))
	}
	return nil
}

// errNotYours refuses an object another owner holds; Register answers it as a missing object.
var errNotYours = errors.New("held by another owner")

// heldByOther reports whether another owner than owner holds the object claimed under k (never,
// in a manager without ExclusiveObjects: its claims are nil).
func heldByOther[K comparable](claims map[K]*claim, k K, owner string) bool {
	c := claims[k]
	return c != nil && c.owner != owner
}

// hold counts one more mapping of owner's on the object claimed under k.
func hold[K comparable](claims map[K]*claim, k K, owner string) {
	c := claims[k]
	if c == nil {
		c = &claim{owner: owner}
		claims[k] = c
	}
	c.refs++
}

// letGo counts one mapping fewer on the object claimed under k, which is free at zero.
func letGo[K comparable](claims map[K]*claim, k K) {
	if c := claims[k]; c != nil {
		if c.refs--; c.refs <= 0 {
			delete(claims, k)
		}
	}
}

// Unregister removes owner's system region name; an unknown name, or a CUDA region's, is not an
// error, as in Triton. The mapping goes when the last request using it finishes.
func (m *Manager) Unregister(owner, name string) error {
	return m.unregister(owner, name, false)
}

// unregister removes owner's region name if it is of the kind asked for.
func (m *Manager) unregister(owner, name string, cuda bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := regionID{owner, name}
	r, ok := m.regions[id]
	if !ok || r.isCUDA != cuda {
		return nil
	}
	delete(m.regions, id)
	return r.dropLocked()
}

// UnregisterAll removes every system region of owner (its CUDA regions stay).
func (m *Manager) UnregisterAll(owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unregisterLocked(false, func(id regionID) bool { return id.owner == owner })
}

// unregisterLocked removes the regions of one kind that match.
func (m *Manager) unregisterLocked(cuda bool, match func(regionID) bool) error {
	var failed []string
	for id, r := range m.regions {
		if r.isCUDA != cuda || !match(id) {
			continue
		}
		delete(m.regions, id)
		if r.dropLocked() != nil {
			failed = append(failed, id.name)
		}
	}
	if failed != nil {
		sort.Strings(failed)
		kind := "system"
		if cuda {
			kind = "cuda"
		}
		return connect.NewError(connect.CodeInternal,
			fmt.Errorf("Failed to unregister the following %s shared memory regions: %s ,", kind, strings.Join(failed, " ,")))
	}
	return nil
}

// Close unregisters every region, of both kinds, and refuses new ones; regions still in use are
// unmapped (and CUDA ones closed) when their requests finish.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	all := func(regionID) bool { return true }
	errSystem, errCUDA := m.unregisterLocked(false, all), m.unregisterLocked(true, all)
	switch {
	case errSystem != nil && errCUDA != nil:
		return errors.Join(errSystem, errCUDA)
	case errSystem != nil:
		return errSystem
	}
	return errCUDA
}

// Status describes owner's system region name, or every system region of owner (sorted by name)
// when name is empty; CUDA regions are CUDAStatus's.
func (m *Manager) Status(owner, name string) ([]Status, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name != "" {
		r, ok := m.regions[regionID{owner, name}]
		if !ok {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("Unable to find system shared memory region: '%s'", name))
		}
		if r.isCUDA {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("The region named '%s' is registered as CUDA shared memory, not system shared memory", name))
		}
		return []Status{r.status}, nil
	}
	out := []Status{}
	for id, r := range m.regions {
		if id.owner == owner && !r.isCUDA {
			out = append(out, r.status)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// dropLocked releases one reference and, at zero, unmaps a system region or closes a CUDA
// region's device memory, when the owner's claim on the object or handle (exclusive managers)
// goes with it: not at unregistering, since a request may still write into the region.
func (r *region) dropLocked() error {
	r.refs--
	if r.refs > 0 {
		return nil
	}
	r.m.mapped.Add(-1)
	if r.isCUDA {
		if r.m.exclusive {
			letGo(r.m.handles, r.handle)
		}
		dev := r.dev
		r.dev = nil
		if err := dev.Close(); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("failed to close CUDA IPC handle of shared memory region '%s': %w", r.cuda.Name, err))
		}
		return nil
	}
	if r.m.exclusive {
		letGo(r.m.names, r.file)
		letGo(r.m.files, r.id)
	}
	mapping := r.mapping
	r.mapping, r.data = nil, nil
	return unmap(mapping)
}

// View is a window of a region a request uses: the region stays mapped (a CUDA region's memory
// open) until Release.
type View struct {
	r    *region
	data []byte       // a system region's window, or
	dev  DeviceMemory // a CUDA region's memory, and the window's start in it
	off  int64
	n    int
	name string
}

// Acquire checks a tensor's offset and byte size against owner's region name and holds the
// region for the request. Offsets and sizes come from the client: negative ones are refused with the
// messages Triton gives for the huge unsigned values they become there.
func (m *Manager) Acquire(owner, name string, offset, byteSize int64) (*View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.regions[regionID{owner, name}]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("Unable to find shared memory region: '%s'", name))
	}
	size := r.size
	if offset < 0 || uint64(offset) >= size {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("Invalid offset for shared memory region: '%s'", name))
	}
	if byteSize < 0 || uint64(byteSize) > size-uint64(offset) {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("Invalid offset + byte size for shared memory region: '%s'", name))
	}
	r.refs++
	if r.isCUDA {
		return &View{r: r, dev: r.dev, off: offset, n: int(byteSize), name: name}, nil
	}
	return &View{r: r, data: r.data[offset : offset+byteSize : offset+byteSize], n: int(byteSize), name: name}, nil
}

// Len is the view's size in bytes.
func (v *View) Len() int { return v.n }

// Release lets the region go; a released view must not be used again. Releasing twice is a
// no-op.
func (v *View) Release() {
	if v == nil || v.r == nil {
		return
	}
	m := v.r.m
	m.mu.Lock()
	_ = v.r.dropLocked()
	m.mu.Unlock()
	v.r, v.data, v.dev, v.n = nil, nil, nil, 0
}

// ReadAll copies the view into a new slice (from the device, for a CUDA region).
func (v *View) ReadAll() ([]byte, error) {
	out := make([]byte, v.n)
	if v.dev != nil {
		if v.n == 0 {
			return out, nil
		}
		if err := v.dev.ReadAt(out, v.off); err != nil {
			return nil, v.deviceError(err)
		}
		return out, nil
	}
	if err := safeCopy(out, v.data); err != nil {
		return nil, v.faultError()
	}
	return out, nil
}

// Write copies p into the view at its start (to the device, for a CUDA region); the caller
// checked that p fits.
func (v *View) Write(p []byte) error {
	if len(p) > v.n {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("%d bytes do not fit shared memory region '%s' (%d bytes)", len(p), v.name, v.n))
	}
	if v.dev != nil {
		if len(p) == 0 {
			return nil
		}
		if err := v.dev.WriteAt(p, v.off); err != nil {
			return v.deviceError(err)
		}
		return nil
	}
	if err := safeCopy(v.data, p); err != nil {
		return v.faultError()
	}
	return nil
}

func (v *View) faultError() error {
	return connect.NewError(connect.CodeInternal,
		fmt.Errorf("shared memory region '%s' could not be accessed: its object shrank below the registered size", v.name))
}

var errFault = errors.New("memory fault")

// safeCopy copies with memory faults turned into an error: a client that truncates its object
// after registering it makes the pages past the new end fault, which would otherwise kill the
// process.
func safeCopy(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = errFault
		}
	}()
	copy(dst, src)
	return nil
}

// Read copies byteSize bytes at offset of owner's region name: an input tensor.
func (m *Manager) Read(owner, name string, offset, byteSize int64) ([]byte, error) {
	v, err := m.Acquire(owner, name, offset, byteSize)
	if err != nil {
		return nil, err
	}
	defer v.Release()
	return v.ReadAll()
}
