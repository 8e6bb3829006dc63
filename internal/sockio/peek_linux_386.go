package sockio

import (
	"os"
	"syscall"
)

// peek goes through the syscall package on 386, whose sockets are reached through socketcall.
func peek(fd uintptr, b []byte) (int, error) {
	n, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch err {
	case nil:
		return n, nil
	case syscall.EAGAIN, syscall.EINTR:
		return 0, err
	}
	return 0, os.NewSyscallError("recvfrom", err)
}
