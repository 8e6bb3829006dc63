package sockio

import (
	"os"
	"syscall"
)

const supported = true

// The socket calls, through the syscall package: macOS has no raw system calls to make. Errors
// other than EAGAIN and EINTR are wrapped as the os package wraps a system call's.

func read(fd uintptr, b []byte) (int, error) {
	n, err := syscall.Read(int(fd), b)
	return result("read", n, err)
}

func write(fd uintptr, b []byte) (int, error) {
	n, err := syscall.Write(int(fd), b)
	return result("write", n, err)
}

func peek(fd uintptr, b []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return result("recvfrom", n, err)
}

func result(call string, n int, err error) (int, error) {
	switch err {
	case nil:
		return n, nil
	case syscall.EAGAIN, syscall.EINTR:
		return 0, err
	}
	return 0, os.NewSyscallError(call, err)
}
