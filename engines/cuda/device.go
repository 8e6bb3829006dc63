//go:build cuda

package cuda

/*
#include <cuda.h>
#include <cublas_v2.h>
#include <stdlib.h>

CUresult ig_cuDeviceGet(CUdevice *d, int ordinal);
CUresult ig_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult ig_cuDevicePrimaryCtxRelease(CUdevice d);
CUresult ig_cuCtxSetCurrent(CUcontext c);
CUresult ig_cuStreamCreate(CUstream *s);
CUresult ig_cuStreamDestroy(CUstream s);
CUresult ig_cuStreamSynchronize(CUstream s);
CUresult ig_cuMemAlloc(CUdeviceptr *p, size_t n);
CUresult ig_cuMemFree(CUdeviceptr p);
CUresult ig_cuMemAllocHost(void **p, size_t n);
CUresult ig_cuMemFreeHost(void *p);
CUresult ig_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s);
CUresult ig_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s);
CUresult ig_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult ig_cuModuleLoadData(CUmodule *m, const void *image);
CUresult ig_cuModuleUnload(CUmodule m);
CUresult ig_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
CUresult ig_launch(CUfunction f, unsigned gx, unsigned bx, CUstream s, void **args);
CUresult ig_cuEventCreate(CUevent *e);
CUresult ig_cuEventRecord(CUevent e, CUstream s);
CUresult ig_cuEventSynchronize(CUevent e);
CUresult ig_cuEventElapsedTime(float *ms, CUevent a, CUevent b);
CUresult ig_cuEventDestroy(CUevent e);
CUresult ig_cuIpcGetMemHandle(void *handle, CUdeviceptr p);
CUresult ig_cuIpcOpenMemHandle(CUdeviceptr *p, const void *handle);
CUresult ig_cuIpcCloseMemHandle(CUdeviceptr p);
CUresult ig_cuMemGetInfo(size_t *free, size_t *total);
CUresult ig_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p);
int ig_cublasCreate(cublasHandle_t *h);
int ig_cublasDestroy(cublasHandle_t h);
int ig_cublasSetStream(cublasHandle_t h, CUstream s);
int ig_cublasSgemm(cublasHandle_t h, int transA, int transB, int m, int n, int k, float alpha,
	CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc);
*/
import "C"

import (
	_ "embed"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

//go:embed kernels.ptx
var kernelsPTX string

// Limits bound what a device's pools hold.
type Limits struct {
	// DeviceBytes caps the device memory the pool holds for requests (weights are apart):
	// default 1 GiB.
	DeviceBytes int64
	// PinnedBytes caps the pinned host memory held for staging copies: default 256 MiB.
	PinnedBytes int64
}

func (l Limits) withDefaults() Limits {
	if l.DeviceBytes <= 0 {
		l.DeviceBytes = 1 << 30
	}
	if l.PinnedBytes <= 0 {
		l.PinnedBytes = 256 << 20
	}
	return l
}

// Device is one GPU: its primary context (shared with every other user of the GPU in the
// process, as the runtime API shares it), the engine's kernels loaded in it, and the pools of
// device and pinned host memory requests draw from.
type Device struct {
	ordinal int
	dev     C.CUdevice
	ctx     C.CUcontext
	mod     C.CUmodule
	addSub  C.CUfunction
	biasAct C.CUfunction
	mem     *pool[uintptr]
	pinned  *pool[unsafe.Pointer]

	mu     sync.Mutex
	closed bool
}

// Open retains GPU ordinal's primary context and loads the engine's kernels into it.
func Open(ordinal int, lim Limits) (*Device, error) {
	if err := loadDriver(); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= driver.devices {
		return nil, fmt.Errorf("cuda: no GPU %d: the driver sees %d", ordinal, driver.devices)
	}
	lim = lim.withDefaults()
	d := &Device{ordinal: ordinal}
	if err := check("cuDeviceGet", C.ig_cuDeviceGet(&d.dev, C.int(ordinal))); err != nil {
		return nil, err
	}
	if err := check("cuDevicePrimaryCtxRetain", C.ig_cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	err := d.run(func() error {
		image := C.CString(kernelsPTX)
		defer C.free(unsafe.Pointer(image))
		if err := check("cuModuleLoadData", C.ig_cuModuleLoadData(&d.mod, unsafe.Pointer(image))); err != nil {
			return err
		}
		for name, fn := range map[string]*C.CUfunction{"add_sub_i32": &d.addSub, "bias_act_f32": &d.biasAct} {
			cname := C.CString(name)
			err := check("cuModuleGetFunction "+name, C.ig_cuModuleGetFunction(fn, d.mod, cname))
			C.free(unsafe.Pointer(cname))
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = C.ig_cuDevicePrimaryCtxRelease(d.dev)
		return nil, err
	}
	d.mem = newPool[uintptr](deviceAlloc{d}, lim.DeviceBytes, fmt.Sprintf("GPU %d's memory pool", ordinal))
	d.pinned = newPool[unsafe.Pointer](hostAlloc{d}, lim.PinnedBytes, "the pinned staging pool")
	return d, nil
}

// Close frees the pools and the kernels and releases the context. Models placed on the device
// must be closed first.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.mem.trim()
	d.pinned.trim()
	err := d.run(func() error { return check("cuModuleUnload", C.ig_cuModuleUnload(d.mod)) })
	if rerr := check("cuDevicePrimaryCtxRelease", C.ig_cuDevicePrimaryCtxRelease(d.dev)); err == nil {
		err = rerr
	}
	return err
}

// Ordinal is the GPU's index, as instance_group's gpus name it.
func (d *Device) Ordinal() int { return d.ordinal }

// run calls fn on an OS thread with the device's context current: the driver keeps the current
// context per thread, and a goroutine may move between threads between calls.
func (d *Device) run(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := check("cuCtxSetCurrent", C.ig_cuCtxSetCurrent(d.ctx)); err != nil {
		return err
	}
	return fn()
}

// MemoryUsage reports the device pool's bytes in use and held, and the GPU's free and total
// memory as the driver sees it.
func (d *Device) MemoryUsage() (inUse, held, free, total int64, err error) {
	inUse, held = d.mem.usage()
	err = d.run(func() error {
		var f, t C.size_t
		if err := check("cuMemGetInfo", C.ig_cuMemGetInfo(&f, &t)); err != nil {
			return err
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return inUse, held, free, total, err
}

type deviceAlloc struct{ d *Device }

func (a deviceAlloc) alloc(n int64) (uintptr, error) {
	var p C.CUdeviceptr
	err := a.d.run(func() error { return check("cuMemAlloc", C.ig_cuMemAlloc(&p, C.size_t(n))) })
	return uintptr(p), err
}

func (a deviceAlloc) free(p uintptr) error {
	return a.d.run(func() error { return check("cuMemFree", C.ig_cuMemFree(C.CUdeviceptr(p))) })
}

type hostAlloc struct{ d *Device }

func (a hostAlloc) alloc(n int64) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := a.d.run(func() error { return check("cuMemAllocHost", C.ig_cuMemAllocHost(&p, C.size_t(n))) })
	return p, err
}

func (a hostAlloc) free(p unsafe.Pointer) error {
	return a.d.run(func() error { return check("cuMemFreeHost", C.ig_cuMemFreeHost(p)) })
}

// stream is one model instance's queue of work on the device, with its cuBLAS handle (made on
// first use).
type stream struct {
	d    *Device
	s    C.CUstream
	blas C.cublasHandle_t
}

func (d *Device) newStream() (*stream, error) {
	st := &stream{d: d}
	err := d.run(func() error { return check("cuStreamCreate", C.ig_cuStreamCreate(&st.s)) })
	if err != nil {
		return nil, err
	}
	return st, nil
}

// gemmHandle makes the stream's cuBLAS handle, bound to the stream. Called inside run.
func (st *stream) gemmHandle() error {
	if st.blas != nil {
		return nil
	}
	if driver.blasErr != nil {
		return driver.blasErr
	}
	if err := checkBLAS("cublasCreate", C.ig_cublasCreate(&st.blas)); err != nil {
		return err
	}
	return checkBLAS("cublasSetStream", C.ig_cublasSetStream(st.blas, st.s))
}

func (st *stream) close() {
	_ = st.d.run(func() error {
		if st.blas != nil {
			_ = C.ig_cublasDestroy(st.blas)
		}
		return check("cuStreamDestroy", C.ig_cuStreamDestroy(st.s))
	})
}

// The calls below are made inside Device.run.

func (st *stream) upload(dst uintptr, src unsafe.Pointer, n int) error {
	return check("cuMemcpyHtoDAsync", C.ig_cuMemcpyHtoDAsync(C.CUdeviceptr(dst), src, C.size_t(n), st.s))
}

func (st *stream) download(dst unsafe.Pointer, src uintptr, n int) error {
	return check("cuMemcpyDtoHAsync", C.ig_cuMemcpyDtoHAsync(dst, C.CUdeviceptr(src), C.size_t(n), st.s))
}

func (st *stream) copyDevice(dst, src uintptr, n int) error {
	return check("cuMemcpyDtoDAsync", C.ig_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), st.s))
}

func (st *stream) sync() error {
	return check("cuStreamSynchronize", C.ig_cuStreamSynchronize(st.s))
}

// args holds a kernel's arguments in C memory, with the array of their addresses that
// cuLaunchKernel reads: a launch is given no Go pointer.
type args struct {
	vals *[8]C.uint64_t
	ptrs *[8]unsafe.Pointer
	n    int
}

func newArgs() *args {
	a := &args{
		vals: (*[8]C.uint64_t)(C.malloc(C.size_t(8 * 8))),
		ptrs: (*[8]unsafe.Pointer)(C.malloc(C.size_t(8 * unsafe.Sizeof(unsafe.Pointer(nil))))),
	}
	return a
}

func (a *args) free() {
	C.free(unsafe.Pointer(a.vals))
	C.free(unsafe.Pointer(a.ptrs))
}

// set lays the arguments out as the kernel's parameters: a device pointer or a 64-bit value
// takes 8 bytes, a 32-bit one the low 4 of its slot (little-endian), which is what the PTX
// parameter of that width reads.
func (a *args) set(vs ...uint64) {
	for i, v := range vs {
		a.vals[i] = C.uint64_t(v)
		a.ptrs[i] = unsafe.Pointer(&a.vals[i])
	}
	a.n = len(vs)
}

const threads = 256

func (st *stream) launch(fn C.CUfunction, n int, a *args) error {
	blocks := (n + threads - 1) / threads
	return check("cuLaunchKernel", C.ig_launch(fn, C.uint(blocks), threads, st.s, (*unsafe.Pointer)(unsafe.Pointer(&a.ptrs[0]))))
}

// gemm computes, in row-major terms, C[rows×out] = A[rows×in] · Wᵀ where W is out×in (a dense
// layer's weight as PyTorch stores it). Column-major, as cuBLAS sees these buffers, that is
// Cᶜ[out×rows] = Wᶜᵀ · Aᶜ: Sgemm with op(W) transposed.
func (st *stream) gemm(c, a, w uintptr, rows, in, out int) error {
	return checkBLAS("cublasSgemm", C.ig_cublasSgemm(st.blas, 1, 0, C.int(out), C.int(rows), C.int(in), 1,
		C.CUdeviceptr(w), C.int(in), C.CUdeviceptr(a), C.int(in), 0, C.CUdeviceptr(c), C.int(out)))
}

// timer measures time on the device between two points of a stream's work (CUDA events).
type timer struct{ start, end C.CUevent }

func newTimer() (*timer, error) {
	t := &timer{}
	if err := check("cuEventCreate", C.ig_cuEventCreate(&t.start)); err != nil {
		return nil, err
	}
	if err := check("cuEventCreate", C.ig_cuEventCreate(&t.end)); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *timer) begin(st *stream) error {
	return check("cuEventRecord", C.ig_cuEventRecord(t.start, st.s))
}
func (t *timer) stop(st *stream) error {
	return check("cuEventRecord", C.ig_cuEventRecord(t.end, st.s))
}

// elapsed waits for the end event and returns the milliseconds between the two.
func (t *timer) elapsed() (float64, error) {
	if err := check("cuEventSynchronize", C.ig_cuEventSynchronize(t.end)); err != nil {
		return 0, err
	}
	var ms C.float
	if err := check("cuEventElapsedTime", C.ig_cuEventElapsedTime(&ms, t.start, t.end)); err != nil {
		return 0, err
	}
	return float64(ms), nil
}

func (t *timer) close() {
	_ = C.ig_cuEventDestroy(t.start)
	_ = C.ig_cuEventDestroy(t.end)
}

// ipcHandle returns the IPC handle of device memory p (a test's stand-in for a client process).
func (d *Device) ipcHandle(p uintptr) ([]byte, error) {
	h := make([]byte, ipcHandleSize)
	err := d.run(func() error {
		buf := C.malloc(C.size_t(ipcHandleSize))
		defer C.free(buf)
		if err := check("cuIpcGetMemHandle", C.ig_cuIpcGetMemHandle(buf, C.CUdeviceptr(p))); err != nil {
			return err
		}
		copy(h, unsafe.Slice((*byte)(buf), ipcHandleSize))
		return nil
	})
	return h, err
}

// OpenIPC maps another process's device memory, named by the IPC handle it exported
// (cuIpcGetMemHandle), into this process; CloseIPC unmaps it.
func (d *Device) OpenIPC(handle []byte) (uintptr, error) {
	if len(handle) != ipcHandleSize {
		return 0, fmt.Errorf("cuda: an IPC handle is %d bytes, not %d", ipcHandleSize, len(handle))
	}
	var p C.CUdeviceptr
	err := d.run(func() error {
		buf := C.CBytes(handle)
		defer C.free(buf)
		return check("cuIpcOpenMemHandle", C.ig_cuIpcOpenMemHandle(&p, buf))
	})
	return uintptr(p), err
}

// allocationEnd is the end of the allocation p lies in: the most a client's region that starts
// at p may span (the driver knows each allocation's range; a client's byte size is only a claim).
func (d *Device) allocationEnd(p uintptr) (uintptr, error) {
	var base C.CUdeviceptr
	var size C.size_t
	err := d.run(func() error {
		return check("cuMemGetAddressRange", C.ig_cuMemGetAddressRange(&base, &size, C.CUdeviceptr(p)))
	})
	return uintptr(base) + uintptr(size), err
}

// CloseIPC unmaps device memory OpenIPC mapped.
func (d *Device) CloseIPC(p uintptr) error {
	return d.run(func() error { return check("cuIpcCloseMemHandle", C.ig_cuIpcCloseMemHandle(C.CUdeviceptr(p))) })
}
