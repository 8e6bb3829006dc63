//go:build linux && !386 && !race && !msan && !asan

package sockio

import (
	"os"
	"syscall"
	"unsafe"
)

const supported = true

// The socket calls, raw (see the package doc). Errors other than EAGAIN and EINTR are wrapped as
// the os package wraps a system call's.

func read(fd uintptr, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return result("read", n, e)
}

func write(fd uintptr, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return result("write", n, e)
}

func peek(fd uintptr, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return result("recvfrom", n, e)
}

func result(call string, n uintptr, e syscall.Errno) (int, error) {
	switch e {
	case 0:
		return int(n), nil
	case syscall.EAGAIN, syscall.EINTR:
		return 0, e
	}
	return 0, os.NewSyscallError(call, e)
}
