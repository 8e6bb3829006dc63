//go:build linux

package shm

import (
	"errors"
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

const supported = true

// maxLen is the largest window end the process can map and slice.
const maxLen = math.MaxInt

var (
	errOpen   = errors.New("open")
	errStat   = errors.New("stat")
	errBounds = errors.New("bounds")
)

// shmDir is where Linux keeps POSIX shared memory objects (shm_open opens names there).
const shmDir = "/dev/shm/"

// mapObject maps the window [offset, offset+size) of the object file under /dev/shm, checked
// against the object's real size, and returns the file's identity. admit sees the identity of
// the file opened (so of the very file mapped, whatever its name) before its size is compared
// with the window, and may refuse it. The mapping starts at the page holding offset, since mmap
// offsets must be page-aligned and Triton's clients may pass any offset.
func mapObject(file string, offset, size uint64, admit func(fileID) error) (mapping, data []byte, id fileID, err error) {
	// O_NOFOLLOW: a symbolic link planted in /dev/shm must not lead outside it.
	fd, err := unix.Open(shmDir+file, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, id, fmt.Errorf("%w: %w", errOpen, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, id, errStat
	}
	id = fileID{dev: uint64(st.Dev), ino: st.Ino} // Dev is narrower on some architectures
	if err := admit(id); err != nil {
		return nil, nil, id, err
	}
	if offset+size > uint64(st.Size) {
		return nil, nil, id, errBounds
	}
	page := uint64(unix.Getpagesize())
	start := offset &^ (page - 1)
	length := offset + size - start
	if length > math.MaxInt {
		return nil, nil, id, errBounds
	}
	mapping, err = unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, id, fmt.Errorf("unable to process address space: %w", err)
	}
	d := offset - start
	return mapping, mapping[d : d+size : d+size], id, nil
}

func unmap(b []byte) error {
	if b == nil {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("unable to munmap shared memory region: %w", err)
	}
	return nil
}
