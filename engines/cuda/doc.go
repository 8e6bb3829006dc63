// Package cuda is the GPU engine: Triton's simple and identity_fp32 and dense networks
// (engines/dense) computed on NVIDIA GPUs, placed by the registry for KIND_GPU instance groups
// (Placer), and the CUDA IPC memory behind Triton's CUDA shared memory (IPCMemory). It is built
// only with the cuda tag; without it the package holds only Probe, which says so, and the
// host-side pieces its tests cover everywhere (the pools, the error codes).
//
// The CUDA driver API and cuBLAS are called through function pointers found with dlopen at run
// time, each typed from NVIDIA's headers (driver.go), rather than through gorgonia.org/cu, which
// the design named: its package init calls os.Exit(1) when cuInit fails, so any binary importing
// it dies before main on a machine without a GPU (measured: docs/cuda.md), which would make a
// cuda build unable to serve its CPU models there and its tests unable to skip; it also links
// cuBLAS by soname and versioned symbols (a build against CUDA 11.8 does not load where CUDA 13
// is installed) and passes device memory to cuBLAS as Go slices. Opening both libraries at run
// time lets one binary run with any driver and any cuBLAS from 11 to 13, and start without
// either.
//
// A Device is one GPU's primary context, the kernels (kernels.cu, compiled to the committed
// kernels.ptx by gen.sh) and two capped pools, of device and of pinned host memory. Each model
// instance has a stream; a request takes a free instance and queues its copies, GEMMs and
// kernels there, waiting once. gpucheck.sh runs the tests and benchmarks on a GPU machine.
package cuda
