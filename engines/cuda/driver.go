//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <cublas_v2.h>

// Each entry point is a pointer of the type cuda.h and cublas_api.h declare for it, found by
// name at run time: the compiler checks every call against NVIDIA's own declarations, and the
// binary needs neither library to start.
#define IG_FN(name) static __typeof__(name) *p_##name;
IG_FN(cuInit)
IG_FN(cuDriverGetVersion)
IG_FN(cuGetErrorName)
IG_FN(cuGetErrorString)
IG_FN(cuDeviceGetCount)
IG_FN(cuDeviceGet)
IG_FN(cuDeviceGetName)
IG_FN(cuDeviceGetAttribute)
IG_FN(cuDeviceTotalMem_v2)
IG_FN(cuDevicePrimaryCtxRetain)
IG_FN(cuDevicePrimaryCtxRelease_v2)
IG_FN(cuCtxSetCurrent)
IG_FN(cuStreamCreate)
IG_FN(cuStreamDestroy_v2)
IG_FN(cuStreamSynchronize)
IG_FN(cuMemAlloc_v2)
IG_FN(cuMemFree_v2)
IG_FN(cuMemAllocHost_v2)
IG_FN(cuMemFreeHost)
IG_FN(cuMemcpyHtoDAsync_v2)
IG_FN(cuMemcpyDtoHAsync_v2)
IG_FN(cuMemcpyDtoDAsync_v2)
IG_FN(cuModuleLoadData)
IG_FN(cuModuleUnload)
IG_FN(cuModuleGetFunction)
IG_FN(cuLaunchKernel)
IG_FN(cuEventCreate)
IG_FN(cuEventRecord)
IG_FN(cuEventSynchronize)
IG_FN(cuEventElapsedTime)
IG_FN(cuEventDestroy_v2)
IG_FN(cuIpcGetMemHandle)
IG_FN(cuIpcOpenMemHandle_v2)
IG_FN(cuIpcCloseMemHandle)
IG_FN(cuMemGetInfo_v2)
IG_FN(cuMemGetAddressRange_v2)
IG_FN(cublasCreate_v2)
IG_FN(cublasDestroy_v2)
IG_FN(cublasSetStream_v2)
IG_FN(cublasSgemm_v2)

#define IG_SYM(lib, name) do { \
	p_##name = (__typeof__(p_##name))dlsym(lib, #name); \
	if (!p_##name) { snprintf(err, errlen, "%s has no %s", libname, #name); return -1; } \
} while (0)

static void *ig_open(const char *const *names, int n, char *err, size_t errlen, const char **found) {
	for (int i = 0; i < n; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h) { *found = names[i]; return h; }
	}
	const char *e = dlerror();
	snprintf(err, errlen, "%s", e ? e : "not found");
	return NULL;
}

// ig_load_driver opens libcuda (path, or libcuda.so.1) and finds the driver API's entry points.
static int ig_load_driver(const char *path, char *err, size_t errlen) {
	const char *names[] = {path && *path ? path : "libcuda.so.1"};
	const char *libname = NULL;
	void *lib = ig_open(names, 1, err, errlen, &libname);
	if (!lib) return -1;
	IG_SYM(lib, cuInit); IG_SYM(lib, cuDriverGetVersion); IG_SYM(lib, cuGetErrorName);
	IG_SYM(lib, cuGetErrorString); IG_SYM(lib, cuDeviceGetCount); IG_SYM(lib, cuDeviceGet);
	IG_SYM(lib, cuDeviceGetName); IG_SYM(lib, cuDeviceGetAttribute); IG_SYM(lib, cuDeviceTotalMem_v2);
	IG_SYM(lib, cuDevicePrimaryCtxRetain); IG_SYM(lib, cuDevicePrimaryCtxRelease_v2);
	IG_SYM(lib, cuCtxSetCurrent); IG_SYM(lib, cuStreamCreate); IG_SYM(lib, cuStreamDestroy_v2);
	IG_SYM(lib, cuStreamSynchronize); IG_SYM(lib, cuMemAlloc_v2); IG_SYM(lib, cuMemFree_v2);
	IG_SYM(lib, cuMemAllocHost_v2); IG_SYM(lib, cuMemFreeHost); IG_SYM(lib, cuMemcpyHtoDAsync_v2);
	IG_SYM(lib, cuMemcpyDtoHAsync_v2); IG_SYM(lib, cuMemcpyDtoDAsync_v2); IG_SYM(lib, cuModuleLoadData);
	IG_SYM(lib, cuModuleUnload); IG_SYM(lib, cuModuleGetFunction); IG_SYM(lib, cuLaunchKernel);
	IG_SYM(lib, cuEventCreate); IG_SYM(lib, cuEventRecord); IG_SYM(lib, cuEventSynchronize);
	IG_SYM(lib, cuEventElapsedTime); IG_SYM(lib, cuEventDestroy_v2); IG_SYM(lib, cuIpcGetMemHandle);
	IG_SYM(lib, cuIpcOpenMemHandle_v2); IG_SYM(lib, cuIpcCloseMemHandle); IG_SYM(lib, cuMemGetInfo_v2);
	IG_SYM(lib, cuMemGetAddressRange_v2);
	return 0;
}

// ig_load_cublas opens cuBLAS (path, or the newest of the sonames tried) and finds its entry
// points. The v2 API these use is the same in cuBLAS 11, 12 and 13.
static int ig_load_cublas(const char *path, char *err, size_t errlen, const char **found) {
	const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"};
	const char *one[] = {path};
	const char *libname = NULL;
	void *lib = path && *path ? ig_open(one, 1, err, errlen, &libname) : ig_open(names, 4, err, errlen, &libname);
	if (!lib) return -1;
	*found = libname;
	IG_SYM(lib, cublasCreate_v2); IG_SYM(lib, cublasDestroy_v2); IG_SYM(lib, cublasSetStream_v2);
	IG_SYM(lib, cublasSgemm_v2);
	return 0;
}

CUresult ig_cuInit(void) { return p_cuInit(0); }
CUresult ig_cuDriverGetVersion(int *v) { return p_cuDriverGetVersion(v); }
static const char *ig_errname(CUresult r) {
	const char *s = NULL;
	if (!p_cuGetErrorName || p_cuGetErrorName(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
static const char *ig_errstring(CUresult r) {
	const char *s = NULL;
	if (!p_cuGetErrorString || p_cuGetErrorString(r, &s) != CUDA_SUCCESS) return NULL;
	return s;
}
CUresult ig_cuDeviceGetCount(int *n) { return p_cuDeviceGetCount(n); }
CUresult ig_cuDeviceGet(CUdevice *d, int ordinal) { return p_cuDeviceGet(d, ordinal); }
CUresult ig_cuDeviceGetName(char *name, int len, CUdevice d) { return p_cuDeviceGetName(name, len, d); }
CUresult ig_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) { return p_cuDeviceGetAttribute(v, a, d); }
CUresult ig_cuDeviceTotalMem(size_t *b, CUdevice d) { return p_cuDeviceTotalMem_v2(b, d); }
CUresult ig_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
CUresult ig_cuDevicePrimaryCtxRelease(CUdevice d) { return p_cuDevicePrimaryCtxRelease_v2(d); }
CUresult ig_cuCtxSetCurrent(CUcontext c) { return p_cuCtxSetCurrent(c); }
CUresult ig_cuStreamCreate(CUstream *s) { return p_cuStreamCreate(s, CU_STREAM_NON_BLOCKING); }
CUresult ig_cuStreamDestroy(CUstream s) { return p_cuStreamDestroy_v2(s); }
CUresult ig_cuStreamSynchronize(CUstream s) { return p_cuStreamSynchronize(s); }
CUresult ig_cuMemAlloc(CUdeviceptr *p, size_t n) { return p_cuMemAlloc_v2(p, n); }
CUresult ig_cuMemFree(CUdeviceptr p) { return p_cuMemFree_v2(p); }
CUresult ig_cuMemAllocHost(void **p, size_t n) { return p_cuMemAllocHost_v2(p, n); }
CUresult ig_cuMemFreeHost(void *p) { return p_cuMemFreeHost(p); }
CUresult ig_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s) { return p_cuMemcpyHtoDAsync_v2(d, h, n, s); }
CUresult ig_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s) { return p_cuMemcpyDtoHAsync_v2(h, d, n, s); }
CUresult ig_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return p_cuMemcpyDtoDAsync_v2(dst, src, n, s); }
CUresult ig_cuModuleLoadData(CUmodule *m, const void *image) { return p_cuModuleLoadData(m, image); }
CUresult ig_cuModuleUnload(CUmodule m) { return p_cuModuleUnload(m); }
CUresult ig_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) { return p_cuModuleGetFunction(f, m, name); }
CUresult ig_cuEventCreate(CUevent *e) { return p_cuEventCreate(e, CU_EVENT_DEFAULT); }
CUresult ig_cuEventRecord(CUevent e, CUstream s) { return p_cuEventRecord(e, s); }
CUresult ig_cuEventSynchronize(CUevent e) { return p_cuEventSynchronize(e); }
CUresult ig_cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return p_cuEventElapsedTime(ms, a, b); }
CUresult ig_cuEventDestroy(CUevent e) { return p_cuEventDestroy_v2(e); }
CUresult ig_cuIpcGetMemHandle(void *handle, CUdeviceptr p) {
	CUipcMemHandle h;
	CUresult r = p_cuIpcGetMemHandle(&h, p);
	memcpy(handle, &h, sizeof h);
	return r;
}
CUresult ig_cuIpcOpenMemHandle(CUdeviceptr *p, const void *handle) {
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof h);
	return p_cuIpcOpenMemHandle_v2(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}
CUresult ig_cuIpcCloseMemHandle(CUdeviceptr p) { return p_cuIpcCloseMemHandle(p); }
CUresult ig_cuMemGetInfo(size_t *free, size_t *total) { return p_cuMemGetInfo_v2(free, total); }
CUresult ig_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) { return p_cuMemGetAddressRange_v2(base, size, p); }
int ig_ipc_handle_size(void) { return (int)sizeof(CUipcMemHandle); }

// Kernel launches take their arguments by address: the callers pass up to 8 pointers to
// values held in C memory (cgo forbids passing Go pointers to Go pointers).
CUresult ig_launch(CUfunction f, unsigned gx, unsigned bx, CUstream s, void **args) {
	return p_cuLaunchKernel(f, gx, 1, 1, bx, 1, 1, 0, s, args, NULL);
}

int ig_cublasCreate(cublasHandle_t *h) { return (int)p_cublasCreate_v2(h); }
int ig_cublasDestroy(cublasHandle_t h) { return (int)p_cublasDestroy_v2(h); }
int ig_cublasSetStream(cublasHandle_t h, CUstream s) { return (int)p_cublasSetStream_v2(h, (cudaStream_t)s); }
// C = alpha * op(A) op(B) + beta * C in column-major order, as cuBLAS computes it.
int ig_cublasSgemm(cublasHandle_t h, int transA, int transB, int m, int n, int k, float alpha,
		CUdeviceptr a, int lda, CUdeviceptr b, int ldb, float beta, CUdeviceptr c, int ldc) {
	return (int)p_cublasSgemm_v2(h, transA ? CUBLAS_OP_T : CUBLAS_OP_N, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
		m, n, k, &alpha, (const float *)a, lda, (const float *)b, ldb, &beta, (float *)c, ldc);
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// The driver's result code values this package acts on are ABI (cuda.h's enum): checked here
// against the header the build compiles with.
var _ = [1]struct{}{}[C.CUDA_ERROR_OUT_OF_MEMORY-codeOutOfMemory]

func check(op string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	e := &Error{Op: op, Code: int(r), Name: fmt.Sprintf("CUresult %d", int(r))}
	if s := C.ig_errname(r); s != nil {
		e.Name = C.GoString(s)
	}
	if s := C.ig_errstring(r); s != nil {
		e.Desc = C.GoString(s)
	}
	return e
}

// cuBLAS statuses, named as cublas_api.h names them.
var blasStatus = map[int]string{1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED"}

func checkBLAS(op string, r C.int) error {
	if r == 0 {
		return nil
	}
	name, ok := blasStatus[int(r)]
	if !ok {
		name = fmt.Sprintf("cublasStatus_t %d", int(r))
	}
	return &Error{Op: op, Code: int(r), Name: name, blas: true}
}

// ipcHandleSize is the size of a CUDA IPC memory handle, as Triton's clients send it.
var ipcHandleSize = int(C.ig_ipc_handle_size())

// The driver is loaded once per process: libcuda's own state is per process.
var driver struct {
	once    sync.Once
	err     error
	version int
	devices int
	blas    string
	blasErr error
}

// loadDriver opens libcuda (INFERGATE_LIBCUDA, or libcuda.so.1) and cuBLAS (INFERGATE_LIBCUBLAS,
// or the newest soname found) and initializes the driver. Without a driver, or without a
// device, every later call returns the same error; without cuBLAS only the models that need it
// fail.
func loadDriver() error {
	driver.once.Do(func() {
		var buf [512]C.char
		path := C.CString(os.Getenv("INFERGATE_LIBCUDA"))
		defer C.free(unsafe.Pointer(path))
		if C.ig_load_driver(path, &buf[0], C.size_t(len(buf))) != 0 {
			driver.err = fmt.Errorf("%w: the CUDA driver library: %s", ErrUnavailable, C.GoString(&buf[0]))
			return
		}
		if err := check("cuInit", C.ig_cuInit()); err != nil {
			driver.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
			return
		}
		var v, n C.int
		if err := check("cuDriverGetVersion", C.ig_cuDriverGetVersion(&v)); err != nil {
			driver.err = err
			return
		}
		if err := check("cuDeviceGetCount", C.ig_cuDeviceGetCount(&n)); err != nil {
			driver.err = err
			return
		}
		if n == 0 {
			driver.err = fmt.Errorf("%w: the CUDA driver sees no device", ErrUnavailable)
			return
		}
		driver.version, driver.devices = int(v), int(n)
		bpath := C.CString(os.Getenv("INFERGATE_LIBCUBLAS"))
		defer C.free(unsafe.Pointer(bpath))
		var found *C.char
		if C.ig_load_cublas(bpath, &buf[0], C.size_t(len(buf)), &found) != 0 {
			driver.blasErr = fmt.Errorf("cuda: cuBLAS: %s", C.GoString(&buf[0]))
		} else {
			driver.blas = C.GoString(found)
		}
	})
	return driver.err
}

// Probe loads the driver and describes what it sees; the error wraps ErrUnavailable when there
// is no driver or no device.
func Probe() (Info, error) {
	if err := loadDriver(); err != nil {
		return Info{}, err
	}
	info := Info{DriverVersion: driver.version, CUBLAS: driver.blas, CUBLASErr: driver.blasErr}
	for i := range driver.devices {
		var d C.CUdevice
		if err := check("cuDeviceGet", C.ig_cuDeviceGet(&d, C.int(i))); err != nil {
			return info, err
		}
		var name [256]C.char
		_ = C.ig_cuDeviceGetName(&name[0], C.int(len(name)), d)
		var mem C.size_t
		_ = C.ig_cuDeviceTotalMem(&mem, d)
		attr := func(a C.CUdevice_attribute) int {
			var v C.int
			_ = C.ig_cuDeviceGetAttribute(&v, a, d)
			return int(v)
		}
		info.Devices = append(info.Devices, DeviceInfo{
			Ordinal: i, Name: C.GoString(&name[0]), Memory: int64(mem),
			Capability:   [2]int{attr(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(C.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)},
			SMs:          attr(C.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
			MemoryClock:  attr(C.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
			MemoryBusBit: attr(C.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
		})
	}
	return info, nil
}
