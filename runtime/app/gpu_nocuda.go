//go:build !cuda

package app

import (
	"log/slog"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/gateway"
)

// setPlacer leaves the registry without a GPU engine: this binary was built without the cuda
// tag, so KIND_GPU instance groups are refused with a message that says so, and CUDA shared
// memory answers as a GPU-less Triton.
func setPlacer(*engines.Registry, gpuConfig, *gateway.Config, *slog.Logger, *[]func()) {}
