package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// ErrPoolFull is returned when a pool's cap would be passed: the request is refused (Triton's
// RESOURCE_EXHAUSTED) rather than the GPU's or the host's memory taken without bound.
var ErrPoolFull = errors.New("cuda: memory pool full")

// allocator is the memory a pool hands out: device memory (cuMemAlloc), addressed by uintptr
// since a device address is no Go pointer, or pinned host memory (cuMemAllocHost), C memory
// addressed by unsafe.Pointer that the Go collector never scans.
type allocator[P comparable] interface {
	alloc(n int64) (P, error)
	free(p P) error
}

// block is one allocation from a pool, of its size class's size.
type block[P comparable] struct {
	ptr  P
	size int64
}

// pool caches allocations by power-of-two size class, as allocating from the driver
// synchronizes the device and takes tens of microseconds. held (in use and cached together)
// never passes limit: to make room it first frees cached blocks of other classes, and past that
// it refuses with ErrPoolFull.
type pool[P comparable] struct {
	a     allocator[P]
	limit int64
	name  string // "device memory" or "pinned host memory", for errors

	mu     sync.Mutex
	held   int64
	inUse  int64
	cached map[int][]P // by class: log2 of the block size
}

// minClass is the smallest block: 256 bytes, the alignment cuMemAlloc guarantees anyway.
const minClass = 8

func newPool[P comparable](a allocator[P], limit int64, name string) *pool[P] {
	return &pool[P]{a: a, limit: limit, name: name, cached: map[int][]P{}}
}

// classOf is the size class of an n-byte request: the smallest power of two at least n.
func classOf(n int64) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len64(uint64(n - 1))
}

// get returns a block of at least n bytes (n > 0).
func (p *pool[P]) get(n int64) (block[P], error) {
	if n <= 0 {
		return block[P]{}, fmt.Errorf("cuda: a %d-byte allocation", n)
	}
	c := classOf(n)
	if c > 62 {
		return block[P]{}, fmt.Errorf("%w: %d bytes of %s asked for", ErrPoolFull, n, p.name)
	}
	size := int64(1) << c
	p.mu.Lock()
	if free := p.cached[c]; len(free) > 0 {
		ptr := free[len(free)-1]
		p.cached[c] = free[:len(free)-1]
		p.inUse += size
		p.mu.Unlock()
		return block[P]{ptr: ptr, size: size}, nil
	}
	if size > p.limit-p.inUse {
		p.mu.Unlock()
		return block[P]{}, fmt.Errorf("%w: %d bytes of %s asked for, %d of its %d in use", ErrPoolFull, size, p.name, p.inUse, p.limit)
	}
	// Room is made by freeing cached blocks of other classes, largest first.
	var evict []P
	for p.held+size > p.limit {
		big := -1
		for k, v := range p.cached {
			if len(v) > 0 && k > big {
				big = k
			}
		}
		free := p.cached[big]
		evict = append(evict, free[len(free)-1])
		p.cached[big] = free[:len(free)-1]
		p.held -= int64(1) << big
	}
	p.held += size
	p.inUse += size
	p.mu.Unlock()
	for _, ptr := range evict {
		_ = p.a.free(ptr)
	}
	ptr, err := p.a.alloc(size)
	if err != nil && isOutOfMemory(err) {
		// The device is shared (other models, other processes): give back every cached block,
		// then try once more.
		p.trim()
		ptr, err = p.a.alloc(size)
	}
	if err != nil {
		p.mu.Lock()
		p.held -= size
		p.inUse -= size
		p.mu.Unlock()
		return block[P]{}, err
	}
	return block[P]{ptr: ptr, size: size}, nil
}

// put returns b to the pool's cache.
func (p *pool[P]) put(b block[P]) {
	var zero P
	if b.ptr == zero {
		return
	}
	p.mu.Lock()
	c := classOf(b.size)
	p.cached[c] = append(p.cached[c], b.ptr)
	p.inUse -= b.size
	p.mu.Unlock()
}

// trim frees every cached block.
func (p *pool[P]) trim() {
	p.mu.Lock()
	var all []P
	for c, v := range p.cached {
		all = append(all, v...)
		p.held -= int64(len(v)) << c
		delete(p.cached, c)
	}
	p.mu.Unlock()
	for _, ptr := range all {
		_ = p.a.free(ptr)
	}
}

// usage reports the bytes in use and held (in use plus cached).
func (p *pool[P]) usage() (inUse, held int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse, p.held
}
