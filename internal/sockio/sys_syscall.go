//go:build darwin || (linux && (386 || race || msan || asan))

package sockio

import (
	"os"
	"syscall"
)

const supported = true

// The socket calls through the syscall package: on macOS, which has no raw system calls to
// make; on linux/386, which reaches sockets through socketcall; and in race, msan and asan
// builds, whose checks (I/O as a happens-before edge, the buffers' accesses) the syscall
// package's calls carry and raw ones would not. Errors other than EAGAIN and EINTR are wrapped
// as the os package wraps a system call's.

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
