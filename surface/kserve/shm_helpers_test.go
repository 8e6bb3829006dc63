package kserve_test

import (
	"slices"

	"github.com/infergate/infergate/surface/kserve"
	"github.com/infergate/infergate/surface/kserve/shm"
)

// extensionsWithShm is what ServerMetadata advertises by default: system shared memory too
// where the build supports it.
func extensionsWithShm() []string {
	if shm.Supported() {
		return append(slices.Clone(kserve.Extensions), "system_shared_memory")
	}
	return kserve.Extensions
}
