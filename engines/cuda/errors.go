package cuda

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
)

// ErrUnavailable is wrapped by every error that says this process cannot use a GPU: a build
// without the cuda tag, no CUDA driver library, or a driver that sees no device.
var ErrUnavailable = errors.New("cuda: no GPU available")

// Error is a failure the CUDA driver or cuBLAS reported: Op is the call, Code its result.
type Error struct {
	Op   string
	Code int
	Name string // the driver's name for Code (CUDA_ERROR_OUT_OF_MEMORY), or cuBLAS's status
	Desc string // the driver's description, when it has one
	blas bool   // Code is a cublasStatus_t, not a CUresult
}

func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("cuda: %s: %s (%s)", e.Op, e.Desc, e.Name)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Op, e.Name)
}

// codeOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
const codeOutOfMemory = 2

// isOutOfMemory reports whether err is the driver's CUDA_ERROR_OUT_OF_MEMORY.
func isOutOfMemory(err error) bool {
	var e *Error
	return errors.As(err, &e) && !e.blas && e.Code == codeOutOfMemory
}

// status is the error a model returns for err, with the code a Triton client sees: memory a
// request cannot get is RESOURCE_EXHAUSTED (the request may succeed later), a GPU that is not
// there UNAVAILABLE, any other driver failure INTERNAL, its message the driver's own words.
func status(model string, err error) error {
	var code connect.Code
	switch {
	case errors.Is(err, ErrPoolFull), isOutOfMemory(err):
		code = connect.CodeResourceExhausted
	case errors.Is(err, ErrUnavailable):
		code = connect.CodeUnavailable
	default:
		code = connect.CodeInternal
	}
	return connect.NewError(code, fmt.Errorf("failed to run model '%s' on the GPU: %w", model, err))
}
