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
// against the object's real size. The mapping starts at the page holding offset, since mmap
// offsets must be page-aligned and Triton's clients may pass any offset.
func mapObject(file string, offset, size uint64) (mapping, data []byte, err error) {
	// O_NOFOLLOW: a symbolic link planted in /dev/shm must not lead outside it.
	fd, err := unix.Open(shmDir+file, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errOpen, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, nil, errStat
	}
	if offset+size > uint64(st.Size) {
		return nil, nil, errBounds
	}
	page := uint64(unix.Getpagesize())
	start := offset &^ (page - 1)
	length := offset + size - start
	if length > math.MaxInt {
		return nil, nil, errBounds
	}
	mapping, err = unix.Mmap(fd, int64(start), int(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("unable to process address space: %v", err)
	}
	d := offset - start
	return mapping, mapping[d : d+size : d+size], nil
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
