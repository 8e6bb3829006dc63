//go:build cuda

package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// IPCMemory is device memory another process exported (cuIpcGetMemHandle) and this one opened:
// a region of Triton's CUDA shared memory extension. Its size is checked against the
// allocation the driver knows, so a client's byte size cannot reach past its own memory.
type IPCMemory struct {
	d    *Device
	ptr  uintptr
	size uint64

	mu     sync.Mutex // one copy at a time on the region's stream
	st     *stream
	closed bool

	hostCopies atomic.Int64 // ReadAt and WriteAt calls: what a GPU model computing in place spares
}

// DevicePointer says where the memory is: a GPU model reads and writes it in place.
func (m *IPCMemory) DevicePointer() (ordinal int, ptr uintptr) { return m.d.ordinal, m.ptr }

// OpenIPC opens handle, byteSize bytes of device memory on GPU device, for reading and writing
// from the host.
func (p *Placer) OpenIPC(device int64, handle []byte, byteSize uint64) (*IPCMemory, error) {
	if device < 0 || device > 1<<16 {
		return nil, fmt.Errorf("no GPU %d", device)
	}
	d, err := p.device(int(device))
	if err != nil {
		return nil, err
	}
	ptr, err := d.OpenIPC(handle)
	if err != nil {
		return nil, err
	}
	end, err := d.allocationEnd(ptr)
	if err == nil && uint64(end-ptr) < byteSize {
		err = fmt.Errorf("the handle's memory holds %d bytes, fewer than the %d registered", end-ptr, byteSize)
	}
	var st *stream
	if err == nil {
		st, err = d.newStream()
	}
	if err != nil {
		_ = d.CloseIPC(ptr)
		return nil, err
	}
	return &IPCMemory{d: d, ptr: ptr, size: byteSize, st: st}, nil
}

func (m *IPCMemory) span(n int, off int64) error {
	if off < 0 || uint64(off) > m.size || uint64(n) > m.size-uint64(off) {
		return fmt.Errorf("cuda: %d bytes at %d are outside the %d-byte region", n, off, m.size)
	}
	return nil
}

// ReadAt copies len(p) bytes at off to p.
func (m *IPCMemory) ReadAt(p []byte, off int64) error { return m.copy(p, off, false) }

// WriteAt copies p to off.
func (m *IPCMemory) WriteAt(p []byte, off int64) error { return m.copy(p, off, true) }

// copy moves p to the region at off (up) or from it, through the host.
func (m *IPCMemory) copy(p []byte, off int64, up bool) error {
	if len(p) == 0 {
		return nil
	}
	if err := m.span(len(p), off); err != nil {
		return err
	}
	m.hostCopies.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("cuda: the region is closed")
	}
	return m.d.run(func() error {
		var err error
		if up {
			err = m.st.upload(m.ptr+uintptr(off), unsafe.Pointer(&p[0]), len(p))
		} else {
			err = m.st.download(unsafe.Pointer(&p[0]), m.ptr+uintptr(off), len(p))
		}
		if err != nil {
			return err
		}
		return m.st.sync()
	})
}

// Close unmaps the memory.
func (m *IPCMemory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	m.st.close()
	return m.d.CloseIPC(m.ptr)
}
