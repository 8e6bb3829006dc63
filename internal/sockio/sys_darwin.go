//go:build linux || darwin

package writewait

import (
	"os"
	"syscall"
)

const supported = true

func write(fd uintptr, b []byte) (int, error) {
	n, err := syscall.Write(int(fd), b)
	if err != nil && err != syscall.EAGAIN && err != syscall.EINTR {
		return n, os.NewSyscallError("write", err)
	}
	return n, err
}
