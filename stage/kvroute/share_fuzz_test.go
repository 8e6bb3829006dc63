package kvroute

import (
	"testing"
)

// FuzzUnpackHashes: a shared record's hashes, as read back from Redis, are taken only when
// well-formed and within the bound, and then round-trip.
func FuzzUnpackHashes(f *testing.F) {
	f.Add(packHashes([]uint64{1, 2, 3}), 4)
	f.Add("1234567", 4)
	f.Add(packHashes(make([]uint64, 5)), 4)
	f.Fuzz(func(t *testing.T, s string, maxBlocks int) {
		h, err := unpackHashes(s, maxBlocks)
		if err != nil {
			return
		}
		if len(h) > max(maxBlocks, 0) {
			t.Fatalf("%d hashes past the bound %d", len(h), maxBlocks)
		}
		if packHashes(h) != s {
			t.Fatalf("round trip changed %q", s)
		}
	})
}
