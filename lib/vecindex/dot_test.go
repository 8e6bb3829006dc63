package vecindex

import (
	"math"
	"math/rand/v2"
	"testing"
)

func naiveDot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func TestDot(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 70; n++ {
		a, b := make([]float32, n), make([]float32, n+3)
		for i := range a {
			a[i] = float32(r.NormFloat64())
		}
		for i := range b {
			b[i] = float32(r.NormFloat64())
		}
		got, want := dot(a, b), naiveDot(a, b)
		if math.Abs(float64(got-want)) > 1e-4*(1+math.Abs(float64(want))) {
			t.Fatalf("n=%d: dot %v, plain loop %v", n, got, want)
		}
	}
}

// BenchmarkDot compares the unrolled dot with a plain loop at dim 384.
func BenchmarkDot(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	v := unitVecs(r, 2, 384)
	var sink float32
	var base float64
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			sink += naiveDot(v[0], v[1])
		}
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("unrolled", func(b *testing.B) {
		for b.Loop() {
			sink += dot(v[0], v[1])
		}
		if base > 0 {
			b.ReportMetric(base/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "x-speedup")
		}
	})
	_ = sink
}
