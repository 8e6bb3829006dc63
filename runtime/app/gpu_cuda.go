//go:build cuda

package app

import (
	"log/slog"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/cuda"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/kserve/shm"
)

// setPlacer gives the registry the CUDA engine when this process sees a GPU, and Triton's CUDA
// shared memory extension its IPC handles; without one the gateway serves its CPU models as any
// build does, and says why KIND_GPU loads are refused.
func setPlacer(reg *engines.Registry, cfg gpuConfig, gw *gateway.Config, log *slog.Logger, closers *[]func()) {
	info, err := cuda.Probe()
	if err != nil {
		log.Warn("no GPU engine: models with KIND_GPU instance groups are refused", "err", err)
		return
	}
	for _, d := range info.Devices {
		log.Info("GPU", "ordinal", d.Ordinal, "name", d.Name, "memory_bytes", d.Memory, "capability", d.Capability)
	}
	if info.CUBLASErr != nil {
		log.Warn("no cuBLAS: dense models cannot run on the GPU", "err", info.CUBLASErr)
	}
	p := cuda.NewPlacer(cuda.Limits{DeviceBytes: cfg.MaxDeviceBytes, PinnedBytes: cfg.MaxPinnedBytes})
	reg.SetPlacer(p)
	gw.CUDASharedMemory = func(device int64, handle []byte, byteSize uint64) (shm.DeviceMemory, error) {
		m, err := p.OpenIPC(device, handle, byteSize)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return m, nil
	}
	*closers = append(*closers, func() {
		if err := p.Close(); err != nil {
			log.Warn("closing the GPU engine", "err", err)
		}
	})
}
