package tokenizer

import (
	"fmt"
	"testing"
)

func TestStrTable(t *testing.T) {
	m := map[string]int32{"": 7}
	for i := range 5000 {
		m[fmt.Sprint("k", i)] = int32(i)
	}
	tab := newStrTable(m)
	for k, id := range m {
		if got, ok := tab.get(k); !ok || got != id {
			t.Fatalf("%q: got %d, %v; want %d", k, got, ok, id)
		}
	}
	for _, k := range []string{"k", "k5000", "k1\x00", "K1", "k12345"} {
		if got, ok := tab.get(k); ok {
			t.Fatalf("%q: found %d, want absent", k, got)
		}
	}
	n := 0
	for k, id := range tab.all() {
		if m[k] != id {
			t.Fatalf("all: %q is %d, want %d", k, id, m[k])
		}
		n++
	}
	if n != len(m) {
		t.Fatalf("all yields %d entries, want %d", n, len(m))
	}
}

// TestLoadedTablesHoldNoPointers: once loaded, the vocabulary is in the packed tables and the
// map and string slice used while loading (300,000 pointers for Qwen, which each garbage
// collection would visit) are gone.
func TestLoadedTablesHoldNoPointers(t *testing.T) {
	for _, name := range []string{"qwen3", "mistral7b"} {
		tok := model(t, name)
		if tok.pieceID != nil || tok.tokBytes != nil {
			t.Fatalf("%s: the loading tables are still held", name)
		}
		if id, ok := tok.TokenID("<|im_end|>"); name == "qwen3" && (!ok || tok.texts.get(id) != "<|im_end|>") {
			t.Fatalf("%s: <|im_end|> is %d, %v", name, id, ok)
		}
	}
}

// TestPieceKey: the short vocabulary's key of a piece is its bytes, little-endian and
// zero-padded, for every length (partialWord's overlapping loads put each byte in its place),
// so no two pieces share a key and length.
func TestPieceKey(t *testing.T) {
	src := "\x01\x82\x03\xf4\x05\x06\xa7\x08\x09\x8a\x0b\xcc\x0d\x0e\xff\x10"
	for n := 1; n <= shortMax; n++ {
		p := src[:n]
		var want [2]uint64
		for i := range n {
			want[i/8] |= uint64(p[i]) << (8 * (i % 8))
		}
		if k0, k1 := pieceKey(p); k0 != want[0] || k1 != want[1] {
			t.Errorf("%d bytes: key %#x %#x, want %#x %#x", n, k0, k1, want[0], want[1])
		}
	}
}
