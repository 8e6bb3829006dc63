//go:build !cuda

package cuda

import "fmt"

// Probe reports that this binary has no GPU engine: it was built without the cuda tag.
func Probe() (Info, error) {
	return Info{}, fmt.Errorf("%w: this binary was built without the cuda tag (go build -tags cuda, see engines/cuda)", ErrUnavailable)
}
