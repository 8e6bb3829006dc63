//go:build !unix

package openai_test

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
