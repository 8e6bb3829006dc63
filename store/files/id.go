package files

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// crockford is Crockford's base32 alphabet. Its digits are in ASCII order, so ids compare as
// strings in the order of the numbers they encode.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idLen is the length of an id after its prefix: 10 characters of time, 16 of randomness.
const idLen = 26

// ids keeps ids made by this process in the order they were made, even within one
// millisecond or when the clock steps back. It is the package's only state: NewID is a plain
// function so the batch package can name its ids the same way without passing a generator around.
var ids idGen

type idGen struct {
	mu  sync.Mutex
	ms  int64    // time part of the last id
	rnd [10]byte // random part of the last id: 80 bits, big-endian
}

// NewID returns prefix followed by 26 characters (Crockford base32): the Unix time in
// milliseconds, then 80 random bits. Ids sort as strings by creation time; ids made by one
// process within one millisecond sort in the order they were made (the random part of each is
// the previous one's plus a random step, so they stay hard to guess).
func NewID(prefix string) string {
	now := time.Now().UnixMilli()
	s := &ids
	s.mu.Lock()
	if now > s.ms {
		s.ms = now
		_, _ = rand.Read(s.rnd[:]) // crypto/rand.Read never fails (Go >= 1.24)
	} else if !s.step() {
		// 80 bits ran out within one millisecond (practically never): borrow the next one.
		s.ms++
		_, _ = rand.Read(s.rnd[:])
	}
	ms, rnd := s.ms, s.rnd
	s.mu.Unlock()

	out := make([]byte, len(prefix)+idLen)
	n := copy(out, prefix)
	// 48 bits of time in 10 characters (50 bits; the top two are zero until the year 10889).
	for i := 9; i >= 0; i-- {
		out[n+i] = crockford[ms&31]
		ms >>= 5
	}
	// 80 random bits in 16 characters: two 40-bit halves of 8 characters each.
	hi := uint64(rnd[0])<<32 | uint64(binary.BigEndian.Uint32(rnd[1:5]))
	lo := uint64(rnd[5])<<32 | uint64(binary.BigEndian.Uint32(rnd[6:10]))
	for i := 7; i >= 0; i-- {
		out[n+10+i] = crockford[hi&31]
		out[n+18+i] = crockford[lo&31]
		hi >>= 5
		lo >>= 5
	}
	return string(out)
}

// step adds a random amount (1 to 2^32) to the random part; false when it would overflow.
func (s *idGen) step() bool {
	var r [4]byte
	_, _ = rand.Read(r[:])
	carry := uint64(binary.BigEndian.Uint32(r[:])) + 1
	for i := len(s.rnd) - 1; i >= 0 && carry > 0; i-- {
		sum := uint64(s.rnd[i]) + carry
		s.rnd[i] = byte(sum)
		carry = sum >> 8
	}
	return carry == 0
}
