//go:build linux && !386

package sockio

import (
	"syscall"
	"unsafe"
)

func peek(fd uintptr, b []byte) (int, error) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return result("recvfrom", n, e)
}
