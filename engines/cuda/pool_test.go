package cuda

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
)

// fakeMem is an allocator with a capacity, standing in for a GPU's memory.
type fakeMem struct {
	capacity, used int64
	next           uintptr
	live           map[uintptr]int64
	allocs, frees  int
}

func (f *fakeMem) alloc(n int64) (uintptr, error) {
	if f.used+n > f.capacity {
		return 0, &Error{Op: "cuMemAlloc", Code: codeOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	}
	if f.live == nil {
		f.live = map[uintptr]int64{}
	}
	f.next += 1 << 40
	f.live[f.next] = n
	f.used += n
	f.allocs++
	return f.next, nil
}

func (f *fakeMem) free(p uintptr) error {
	n, ok := f.live[p]
	if !ok {
		return fmt.Errorf("free of %#x, never allocated", p)
	}
	delete(f.live, p)
	f.used -= n
	f.frees++
	return nil
}

func TestPoolReusesBySizeClass(t *testing.T) {
	mem := &fakeMem{capacity: 1 << 30}
	p := newPool[uintptr](mem, 1<<20, "test pool")
	b, err := p.get(1000)
	require.NoError(t, err)
	require.Equal(t, int64(1024), b.size)
	p.put(b)
	c, err := p.get(600) // the same class: the cached block
	require.NoError(t, err)
	require.Equal(t, b.ptr, c.ptr)
	require.Equal(t, 1, mem.allocs)
	small, err := p.get(1)
	require.NoError(t, err)
	require.Equal(t, int64(256), small.size)
	inUse, held := p.usage()
	require.Equal(t, int64(1024+256), inUse)
	require.Equal(t, inUse, held)
}

// held never passes the cap: cached blocks of other classes are freed to make room, and past
// what is in use a request is refused with ErrPoolFull.
func TestPoolCap(t *testing.T) {
	mem := &fakeMem{capacity: 1 << 30}
	p := newPool[uintptr](mem, 1<<20, "test pool")
	a, err := p.get(512 << 10)
	require.NoError(t, err)
	b, err := p.get(256 << 10)
	require.NoError(t, err)
	p.put(a)
	p.put(b)
	// 1 MiB: both cached blocks must go first.
	c, err := p.get(1 << 20)
	require.NoError(t, err)
	require.Equal(t, 2, mem.frees)
	require.Equal(t, int64(1<<20), mem.used)
	_, err = p.get(1)
	require.ErrorIs(t, err, ErrPoolFull)
	_, err = p.get(2 << 20)
	require.ErrorIs(t, err, ErrPoolFull)
	p.put(c)
	_, held := p.usage()
	require.Equal(t, int64(1<<20), held)
	p.trim()
	_, held = p.usage()
	require.Zero(t, held)
	require.Zero(t, mem.used)
}

// When the device itself is out of memory (other users of the GPU), the pool gives back its
// cache and tries again; what it could not get leaves no accounting behind.
func TestPoolOutOfMemory(t *testing.T) {
	mem := &fakeMem{capacity: 1 << 20}
	p := newPool[uintptr](mem, 1<<30, "test pool")
	a, err := p.get(512 << 10)
	require.NoError(t, err)
	p.put(a)
	b, err := p.get(1 << 20) // fits only once the cached half is freed
	require.NoError(t, err)
	_, err = p.get(1 << 20)
	require.True(t, isOutOfMemory(err), "%v", err)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(status("m", err)))
	inUse, held := p.usage()
	require.Equal(t, b.size, inUse)
	require.Equal(t, b.size, held)
}

func TestStatusCodes(t *testing.T) {
	for err, code := range map[error]connect.Code{
		fmt.Errorf("x: %w", ErrPoolFull):                                          connect.CodeResourceExhausted,
		&Error{Op: "cuMemAlloc", Code: codeOutOfMemory}:                           connect.CodeResourceExhausted,
		&Error{Op: "cublasCreate", Code: codeOutOfMemory, blas: true}:             connect.CodeInternal,
		fmt.Errorf("%w: no device", ErrUnavailable):                               connect.CodeUnavailable,
		&Error{Op: "cuLaunchKernel", Code: 719, Name: "CUDA_ERROR_LAUNCH_FAILED"}: connect.CodeInternal,
	} {
		got := status("simple", err)
		require.Equal(t, code, connect.CodeOf(got), "%v", err)
		require.ErrorContains(t, got, "failed to run model 'simple' on the GPU")
		require.True(t, errors.Is(got, err) || errors.As(got, new(*Error)))
	}
}

func TestProbeWithoutCUDA(t *testing.T) {
	_, err := Probe()
	if err == nil {
		t.Skip("this process sees a GPU")
	}
	require.ErrorIs(t, err, ErrUnavailable)
}
