package kvroute_test

import (
	"fmt"
	"testing"

	"github.com/infergate/infergate/stage/kvroute"
	"github.com/infergate/infergate/upstream"
)

// BenchmarkRoutingOverhead is what cache-aware routing adds to one request's pick among 8
// endpoints, each holding 2,000 conversations' worth of blocks: hashing a 2,000-token prompt
// (or 8 KB of text, without a tokenizer) and scoring every endpoint's prefix, against the
// least-outstanding pick. It reports the added microseconds per request.
func BenchmarkRoutingOverhead(b *testing.B) {
	x := kvroute.New("m", kvroute.Options{})
	c := make(cands, 8)
	for i := range c {
		c[i].ok, c[i].load = true, int64(i%3)
	}
	for conv := range 2000 {
		x.Record(fmt.Sprint("ep", conv%8), x.TokenHashes(ids(2000, conv)))
	}
	prompt := ids(2000, 7)
	text := make([]byte, 8192)
	for i := range text {
		text[i] = byte('a' + i%26)
	}
	var base float64
	for _, arm := range []struct {
		name string
		pick func(r uint32) int
	}{
		{"least_outstanding", func(r uint32) int { return upstream.LeastOutstanding{}.Pick(c, r) }},
		{"cache_aware_tokens", func(r uint32) int { return kvroute.PickerFor(x, x.TokenHashes(prompt)).Pick(c, r) }},
		{"cache_aware_text", func(r uint32) int { return kvroute.PickerFor(x, x.TextHashes(text)).Pick(c, r) }},
	} {
		b.Run(arm.name, func(b *testing.B) {
			b.ReportAllocs()
			r := uint32(0)
			for b.Loop() {
				r++
				if arm.pick(r) < 0 {
					b.Fatal("no pick")
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if base == 0 {
				base = ns
				return
			}
			b.ReportMetric((ns-base)/1e3, "added-us")
		})
	}
}
