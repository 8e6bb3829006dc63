//go:build linux

package shm_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeGPU stands in for the GPU engine: exported allocations by handle, each opening a mapping
// of its own that counts its copies and closes.
type fakeGPU struct {
	mu       sync.Mutex
	allocs   map[string][]byte // handle bytes -> device memory
	opens    int               // calls of open
	mappings []*fakeMapping
}

// fakeMapping is one opened handle: a window onto its allocation with a closed flag.
type fakeMapping struct {
	gpu            *fakeGPU
	device         int64
	mem            []byte
	closes         int
	reads, writes  int
	lastOff        int64
	fail           error // returned by ReadAt and WriteAt when set
	usedAfterClose bool
}

const handleLen = 64

func newFakeGPU() *fakeGPU { return &fakeGPU{allocs: map[string][]byte{}} }

// alloc exports size bytes of device memory and returns its handle.
func (g *fakeGPU) alloc(size int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := make([]byte, handleLen)
	copy(h, fmt.Sprintf("handle-%d", len(g.allocs)))
	g.allocs[string(h)] = make([]byte, size)
	return h
}

func (g *fakeGPU) memory(h []byte) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allocs[string(h)]
}

var errInvalidHandle = errors.New("cuda: cuIpcOpenMemHandle: invalid argument (CUDA_ERROR_INVALID_VALUE)")

func (g *fakeGPU) open(device int64, handle []byte, size uint64) (shm.DeviceMemory, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opens++
	if len(handle) != handleLen {
		return nil, fmt.Errorf("cuda: an IPC handle is %d bytes, not %d", handleLen, len(handle))
	}
	mem, ok := g.allocs[string(handle)]
	if !ok {
		return nil, errInvalidHandle
	}
	if size > uint64(len(mem)) {
		return nil, fmt.Errorf("cuda: the allocation holds %d bytes, not %d", len(mem), size)
	}
	handle[0] ^= 0xff // the manager passed its own copy: this must not change its key
	mp := &fakeMapping{gpu: g, device: device, mem: mem[:size]}
	g.mappings = append(g.mappings, mp)
	return mp, nil
}

func (g *fakeGPU) openCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.opens
}

// open and closed count the mappings opened and those closed; every close must be the first of
// its mapping and no copy may follow it.
func (g *fakeGPU) counts(t *testing.T) (open, closed int) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, mp := range g.mappings {
		assert.LessOrEqual(t, mp.closes, 1, "closed twice")
		assert.False(t, mp.usedAfterClose, "copied after its close")
		closed += mp.closes
	}
	return len(g.mappings), closed
}

func (g *fakeGPU) last() *fakeMapping {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mappings[len(g.mappings)-1]
}

func (mp *fakeMapping) ReadAt(p []byte, off int64) error {
	mp.gpu.mu.Lock()
	defer mp.gpu.mu.Unlock()
	mp.usedAfterClose = mp.usedAfterClose || mp.closes > 0
	mp.reads++
	mp.lastOff = off
	if mp.fail != nil {
		return mp.fail
	}
	if off < 0 || off+int64(len(p)) > int64(len(mp.mem)) {
		return fmt.Errorf("read [%d, %d) out of %d bytes", off, off+int64(len(p)), len(mp.mem))
	}
	copy(p, mp.mem[off:])
	return nil
}

func (mp *fakeMapping) WriteAt(p []byte, off int64) error {
	mp.gpu.mu.Lock()
	defer mp.gpu.mu.Unlock()
	mp.usedAfterClose = mp.usedAfterClose || mp.closes > 0
	mp.writes++
	mp.lastOff = off
	if mp.fail != nil {
		return mp.fail
	}
	if off < 0 || off+int64(len(p)) > int64(len(mp.mem)) {
		return fmt.Errorf("write [%d, %d) out of %d bytes", off, off+int64(len(p)), len(mp.mem))
	}
	copy(mp.mem[off:], p)
	return nil
}

func (mp *fakeMapping) Close() error {
	mp.gpu.mu.Lock()
	defer mp.gpu.mu.Unlock()
	mp.closes++
	return nil
}

func requireErr(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, connect.CodeOf(err), "%v", err)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce))
	require.Equal(t, msg, ce.Message())
}

func TestCUDARegisterStatusUnregister(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	assert.True(t, m.CUDA())
	assert.False(t, shm.New(0).CUDA())
	h1, h2 := gpu.alloc(64), gpu.alloc(128)
	require.NoError(t, m.RegisterCUDA("", "out", h2, 1, 128))
	require.NoError(t, m.RegisterCUDA("", "in", h1, 0, 64))
	assert.Equal(t, 2, m.Mapped())
	requireErr(t, m.RegisterCUDA("", "in", h2, 0, 8), connect.CodeAlreadyExists, "shared memory region 'in' already in manager")

	st, err := m.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Equal(t, []shm.CUDAStatus{{Name: "in", DeviceID: 0, ByteSize: 64}, {Name: "out", DeviceID: 1, ByteSize: 128}}, st)
	st, err = m.CUDAStatus("", "out")
	require.NoError(t, err)
	assert.Equal(t, []shm.CUDAStatus{{Name: "out", DeviceID: 1, ByteSize: 128}}, st)
	_, err = m.CUDAStatus("", "nope")
	requireErr(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: 'nope'")
	st, err = m.CUDAStatus("bob", "")
	require.NoError(t, err)
	assert.Empty(t, st, "owners are namespaces")
	_, err = m.CUDAStatus("bob", "in")
	requireErr(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: 'in'")

	require.NoError(t, m.UnregisterCUDA("", "nope"), "an unknown name is not an error")
	require.NoError(t, m.UnregisterCUDA("bob", "in"), "nor another owner's")
	require.NoError(t, m.UnregisterAllCUDA("bob"))
	opened, closed := gpu.counts(t)
	assert.Equal(t, 2, opened)
	assert.Zero(t, closed)

	require.NoError(t, m.UnregisterCUDA("", "in"))
	_, closed = gpu.counts(t)
	assert.Equal(t, 1, closed, "no request held it: closed at once")
	_, err = m.CUDAStatus("", "in")
	requireErr(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: 'in'")
	require.NoError(t, m.RegisterCUDA("", "in", h1, 0, 64), "the name is free again")
	require.NoError(t, m.UnregisterAllCUDA(""))
	opened, closed = gpu.counts(t)
	assert.Equal(t, 3, opened)
	assert.Equal(t, 3, closed)
	assert.Zero(t, m.Mapped())
	st, err = m.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Empty(t, st)
}

func TestCUDARegisterRefusals(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	h := gpu.alloc(64)
	invalidArgs := "failed to register shared memory region 'x': invalid args"
	requireErr(t, m.RegisterCUDA("", "x", h, 0, 0), connect.CodeInvalidArgument, invalidArgs)
	requireErr(t, m.RegisterCUDA("", "x", h, 0, math.MaxInt64+1), connect.CodeInvalidArgument, invalidArgs)
	requireErr(t, m.RegisterCUDA("", "x", h, 0, math.MaxUint64), connect.CodeInvalidArgument, invalidArgs)
	assert.Zero(t, gpu.openCalls(), "refused before opening")

	requireErr(t, m.RegisterCUDA("", "x", h[:3], 0, 8), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': cuda: an IPC handle is 64 bytes, not 3")
	requireErr(t, m.RegisterCUDA("", "x", make([]byte, handleLen), 0, 8), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': "+errInvalidHandle.Error())
	requireErr(t, m.RegisterCUDA("", "x", h, 0, 65), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': cuda: the allocation holds 64 bytes, not 65")
	assert.Zero(t, m.Mapped())

	// A status error of the opener's is the client's answer as it is.
	busy := shm.New(0, shm.WithCUDA(func(int64, []byte, uint64) (shm.DeviceMemory, error) {
		return nil, fmt.Errorf("wrapped: %w", connect.NewError(connect.CodeUnavailable, errors.New("the GPU is gone")))
	}))
	requireErr(t, busy.RegisterCUDA("", "x", h, 0, 8), connect.CodeUnavailable, "the GPU is gone")
	st, err := busy.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Empty(t, st)

	// Without WithCUDA nothing registers, and status and unregister find nothing.
	off := shm.New(0)
	err = off.RegisterCUDA("", "x", h, 0, 8)
	assert.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
	_, err = off.CUDAStatus("", "x")
	requireErr(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: 'x'")
	require.NoError(t, off.UnregisterCUDA("", "x"))
	require.NoError(t, off.UnregisterAllCUDA(""))

	require.NoError(t, m.Close())
	requireErr(t, m.RegisterCUDA("", "x", h, 0, 8), connect.CodeUnavailable, "Server is stopping")
}

// One namespace per owner for both kinds, as in Triton's one map; each kind's status and
// unregister calls see only their own kind.
func TestCUDASharesNamesWithSystem(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	key := object(t, 64)
	h := gpu.alloc(64)
	require.NoError(t, m.Register("", "sys", key, 0, 64))
	require.NoError(t, m.RegisterCUDA("", "gpu", h, 0, 64))
	requireErr(t, m.RegisterCUDA("", "sys", h, 0, 64), connect.CodeAlreadyExists, "shared memory region 'sys' already in manager")
	requireErr(t, m.Register("", "gpu", key, 0, 64), connect.CodeAlreadyExists, "shared memory region 'gpu' already in manager")
	require.NoError(t, m.RegisterCUDA("bob", "sys", h, 0, 64), "another owner's namespace")
	require.NoError(t, m.UnregisterCUDA("bob", "sys"))

	st, err := m.Status("", "")
	require.NoError(t, err)
	require.Len(t, st, 1)
	assert.Equal(t, "sys", st[0].Name)
	cst, err := m.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Equal(t, []shm.CUDAStatus{{Name: "gpu", ByteSize: 64}}, cst)
	_, err = m.Status("", "gpu")
	requireErr(t, err, connect.CodeNotFound, "The region named 'gpu' is registered as CUDA shared memory, not system shared memory")
	_, err = m.CUDAStatus("", "sys")
	requireErr(t, err, connect.CodeNotFound, "The region named 'sys' is registered as system shared memory, not CUDA shared memory")

	// Unregistering one kind's name through the other's call is a no-op.
	require.NoError(t, m.Unregister("", "gpu"))
	require.NoError(t, m.UnregisterCUDA("", "sys"))
	require.NoError(t, m.UnregisterAll(""))
	cst, err = m.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Len(t, cst, 1, "UnregisterAll leaves CUDA regions")
	_, closed := gpu.counts(t)
	assert.Equal(t, 1, closed, "only bob's region was closed")
	require.NoError(t, m.Register("", "sys", key, 0, 64))
	require.NoError(t, m.UnregisterAllCUDA(""))
	st, err = m.Status("", "")
	require.NoError(t, err)
	assert.Len(t, st, 1, "UnregisterAllCUDA leaves system regions")
	cst, err = m.CUDAStatus("", "")
	require.NoError(t, err)
	assert.Empty(t, cst)
	assert.Equal(t, 1, m.Mapped())
	require.NoError(t, m.Close())
	assert.Zero(t, m.Mapped())
}

// The cap counts both kinds.
func TestCUDACapCountsBothKinds(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(3, shm.WithCUDA(gpu.open))
	key := object(t, 64)
	h := gpu.alloc(64)
	require.NoError(t, m.Register("", "s0", key, 0, 8))
	require.NoError(t, m.RegisterCUDA("", "g0", h, 0, 8))
	require.NoError(t, m.RegisterCUDA("carol", "g1", h, 0, 8))
	full := "failed to register shared memory region 'x': the server holds the most regions it allows (3); unregister some first"
	requireErr(t, m.RegisterCUDA("", "x", h, 0, 8), connect.CodeResourceExhausted, full)
	requireErr(t, m.Register("", "x", key, 0, 8), connect.CodeResourceExhausted, full)
	assert.Equal(t, 2, gpu.openCalls(), "a full manager does not open")
	require.NoError(t, m.Unregister("", "s0"))
	require.NoError(t, m.RegisterCUDA("", "x", h, 0, 8))
	requireErr(t, m.Register("", "y", key, 0, 8), connect.CodeResourceExhausted,
		"failed to register shared memory region 'y': the server holds the most regions it allows (3); unregister some first")
	require.NoError(t, m.Close())
	opened, closed := gpu.counts(t)
	assert.Equal(t, 3, opened)
	assert.Equal(t, 3, closed)
}

// Acquire checks a CUDA region's windows with the system regions' messages, and Read and Write
// reach the device memory at the region's offsets.
func TestCUDAAcquireReadWrite(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	h := gpu.alloc(128)
	mem := gpu.memory(h)
	for i := range mem {
		mem[i] = byte(i)
	}
	require.NoError(t, m.RegisterCUDA("", "r", h, 0, 100))
	mp := gpu.last()

	for _, c := range []struct {
		off, size int64
		msg       string
	}{
		{100, 0, "Invalid offset for shared memory region: 'r'"},
		{-1, 1, "Invalid offset for shared memory region: 'r'"},
		{math.MinInt64, 1, "Invalid offset for shared memory region: 'r'"},
		{0, 101, "Invalid offset + byte size for shared memory region: 'r'"},
		{99, 2, "Invalid offset + byte size for shared memory region: 'r'"},
		{1, -1, "Invalid offset + byte size for shared memory region: 'r'"},
		{50, math.MaxInt64, "Invalid offset + byte size for shared memory region: 'r'"},
	} {
		_, err := m.Acquire("", "r", c.off, c.size)
		requireErr(t, err, connect.CodeInvalidArgument, c.msg)
		_, err = m.Read("", "r", c.off, c.size)
		requireErr(t, err, connect.CodeInvalidArgument, c.msg)
	}
	_, err := m.Acquire("", "nope", 0, 1)
	requireErr(t, err, connect.CodeNotFound, "Unable to find shared memory region: 'nope'")
	_, err = m.Acquire("bob", "r", 0, 1)
	requireErr(t, err, connect.CodeNotFound, "Unable to find shared memory region: 'r'")
	assert.Zero(t, mp.reads+mp.writes, "refused windows are not copied")

	got, err := m.Read("", "r", 10, 5)
	require.NoError(t, err)
	assert.Equal(t, []byte{10, 11, 12, 13, 14}, got)
	assert.Equal(t, int64(10), mp.lastOff)
	got, err = m.Read("", "r", 96, 4)
	require.NoError(t, err)
	assert.Equal(t, []byte{96, 97, 98, 99}, got, "the window's last bytes")

	v, err := m.Acquire("", "r", 40, 8)
	require.NoError(t, err)
	assert.Equal(t, 8, v.Len())
	require.NoError(t, v.Write([]byte("written")))
	assert.Equal(t, int64(40), mp.lastOff)
	assert.Equal(t, "written", string(mem[40:47]))
	assert.Equal(t, byte(47), mem[47], "only p's bytes")
	requireErr(t, v.Write([]byte("nine bytes")), connect.CodeInternal, "10 bytes do not fit shared memory region 'r' (8 bytes)")
	got, err = v.ReadAll()
	require.NoError(t, err)
	assert.Equal(t, append([]byte("written"), 47), got)

	mp.fail = errors.New("cuda: cuMemcpyDtoH: an illegal memory access was encountered (CUDA_ERROR_ILLEGAL_ADDRESS)")
	_, err = v.ReadAll()
	requireErr(t, err, connect.CodeInternal, "CUDA shared memory region 'r' could not be accessed: "+mp.fail.Error())
	requireErr(t, v.Write([]byte("x")), connect.CodeInternal, "CUDA shared memory region 'r' could not be accessed: "+mp.fail.Error())
	mp.fail = connect.NewError(connect.CodeUnavailable, errors.New("GPU lost"))
	requireErr(t, v.Write([]byte("x")), connect.CodeUnavailable, "GPU lost")
	mp.fail = nil
	v.Release()

	empty, err := m.Acquire("", "r", 99, 0)
	require.NoError(t, err)
	got, err = empty.ReadAll()
	require.NoError(t, err)
	assert.Empty(t, got)
	require.NoError(t, empty.Write(nil))
	empty.Release()
	require.NoError(t, m.Close())
	_, closed := gpu.counts(t)
	assert.Equal(t, 1, closed)
}

// Unregistering (or closing the manager) while a request holds a CUDA region keeps its memory
// open until the request releases it; then it is closed exactly once.
func TestCUDAInFlightKeepsMemoryOpen(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	h := gpu.alloc(64)
	require.NoError(t, m.RegisterCUDA("", "out", h, 0, 64))
	v1, err := m.Acquire("", "out", 0, 32)
	require.NoError(t, err)
	v2, err := m.Acquire("", "out", 32, 32)
	require.NoError(t, err)
	require.NoError(t, m.UnregisterCUDA("", "out"))
	_, err = m.CUDAStatus("", "out")
	requireErr(t, err, connect.CodeNotFound, "Unable to find cuda shared memory region: 'out'")
	_, err = m.Acquire("", "out", 0, 1)
	requireErr(t, err, connect.CodeNotFound, "Unable to find shared memory region: 'out'")
	require.NoError(t, m.RegisterCUDA("", "out", h, 0, 64), "the name is free at once")
	require.NoError(t, m.UnregisterCUDA("", "out"))
	_, closed := gpu.counts(t)
	assert.Equal(t, 1, closed, "the second registration's memory, not the one in use")
	assert.Equal(t, 1, m.Mapped())

	require.NoError(t, v1.Write([]byte("first half")))
	v1.Release()
	_, closed = gpu.counts(t)
	assert.Equal(t, 1, closed, "v2 still holds it")
	require.NoError(t, v2.Write([]byte("second half")))
	v2.Release()
	v2.Release() // twice is harmless
	v1.Release()
	opened, closed := gpu.counts(t)
	assert.Equal(t, 2, opened)
	assert.Equal(t, 2, closed)
	assert.Equal(t, "first half", string(gpu.memory(h)[:10]))
	assert.Equal(t, "second half", string(gpu.memory(h)[32:43]))
	assert.Zero(t, m.Mapped())

	// Close: the same.
	require.NoError(t, m.RegisterCUDA("", "a", h, 0, 64))
	v, err := m.Acquire("", "a", 0, 64)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	_, closed = gpu.counts(t)
	assert.Equal(t, 2, closed)
	require.NoError(t, v.Write([]byte("after close")))
	v.Release()
	_, closed = gpu.counts(t)
	assert.Equal(t, 3, closed)
	assert.Zero(t, m.Mapped())
}

// With ExclusiveObjects a handle is its first registrant's while any of its mappings lives:
// another owner naming it, under any region name or device, gets exactly what a handle that
// cannot be opened gets, and the opener is not called. Without the option any owner may.
func TestCUDAExclusiveHandles(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.ExclusiveObjects(), shm.WithCUDA(gpu.open))
	h, other := gpu.alloc(64), gpu.alloc(64)
	unknown := make([]byte, handleLen)
	unknown[0] = 1
	require.NoError(t, m.RegisterCUDA("alice", "a", h, 0, 64))
	require.NoError(t, m.RegisterCUDA("alice", "b", h, 0, 32), "the owner may open its handle again")

	refused := func(when string) {
		t.Helper()
		calls := gpu.openCalls()
		want := m.RegisterCUDA("bob", "x", unknown, 0, 64)
		require.Equal(t, calls+1, gpu.openCalls(), "an unknown handle is tried")
		requireErr(t, want, connect.CodeInvalidArgument, "failed to register CUDA shared memory region 'x': failed to open CUDA IPC handle: invalid argument")
		calls++
		for _, device := range []int64{0, 1} {
			for _, name := range []string{"x", "a"} {
				for _, size := range []uint64{8, 64, 1 << 40} {
					err := m.RegisterCUDA("bob", name, h, device, size)
					requireErr(t, err, connect.CodeInvalidArgument, strings.Replace(want.(*connect.Error).Message(), "'x'", "'"+name+"'", 1))
				}
			}
		}
		assert.Equal(t, calls, gpu.openCalls(), "%s: a held handle is not opened for another owner", when)
		st, err := m.CUDAStatus("bob", "")
		require.NoError(t, err)
		assert.Empty(t, st, when)
	}
	refused("alice holds two regions")
	require.NoError(t, m.RegisterCUDA("bob", "x", other, 0, 64), "another handle is free")
	require.NoError(t, m.UnregisterCUDA("bob", "x"))

	v, err := m.Acquire("alice", "a", 0, 64)
	require.NoError(t, err)
	require.NoError(t, m.UnregisterAllCUDA("alice"))
	refused("alice's request still holds an unregistered region")
	require.NoError(t, v.Write([]byte("alice's output")))
	v.Release()
	assert.Zero(t, m.Mapped())

	require.NoError(t, m.RegisterCUDA("bob", "x", h, 1, 64), "free once alice's last mapping went")
	got, err := m.Read("bob", "x", 0, 14)
	require.NoError(t, err)
	assert.Equal(t, "alice's output", string(got))
	requireErr(t, m.RegisterCUDA("alice", "a", h, 0, 64), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'a': failed to open CUDA IPC handle: invalid argument")
	require.NoError(t, m.Close())
	opened, closed := gpu.counts(t)
	assert.Equal(t, opened, closed)
	assert.Zero(t, m.Mapped())

	open := shm.New(0, shm.WithCUDA(gpu.open))
	require.NoError(t, open.RegisterCUDA("alice", "a", h, 0, 64))
	require.NoError(t, open.RegisterCUDA("bob", "a", h, 0, 64), "without the option, Triton's model")
	requireErr(t, open.RegisterCUDA("bob", "x", unknown, 0, 64), connect.CodeInvalidArgument,
		"failed to register CUDA shared memory region 'x': "+errInvalidHandle.Error())
	require.NoError(t, open.Close())
}

func TestCUDAConcurrentUseAndUnregister(t *testing.T) {
	t.Parallel()
	gpu := newFakeGPU()
	m := shm.New(0, shm.WithCUDA(gpu.open))
	key := object(t, 64)
	h := gpu.alloc(4096)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 50 {
				name := fmt.Sprint(j % 5)
				if (i+j)%3 == 0 {
					_ = m.Register("", name, key, 0, 64)
				} else {
					_ = m.RegisterCUDA("", name, h, 0, 4096)
				}
				if v, err := m.Acquire("", fmt.Sprint((i+j)%5), 0, 64); err == nil {
					_, _ = v.ReadAll()
					_ = v.Write([]byte("x"))
					v.Release()
				}
			}
		}()
		go func() {
			defer wg.Done()
			for j := range 50 {
				if j%2 == 0 {
					_ = m.UnregisterCUDA("", fmt.Sprint((i*j)%5))
				} else {
					_ = m.Unregister("", fmt.Sprint((i*j)%5))
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, m.Close())
	assert.Zero(t, m.Mapped())
	opened, closed := gpu.counts(t)
	assert.Equal(t, opened, closed)
}
