package pipeline

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkScanBodies: the routing scan (what NewRequest and Scan run on every request) on
// internal/jsonwire's benchmark bodies: a 1 KB chat body, a 1.5 KB agent turn with a tool call,
// and an 80 KB 40-turn history with \u-escaped messages, "model" and "stream" last.
func BenchmarkScanBodies(b *testing.B) {
	for _, name := range []string{"routing.json", "agent.json", "history.json"} {
		body, err := os.ReadFile(filepath.Join("..", "..", "internal", "jsonwire", "testdata", "bench", name))
		if err != nil {
			b.Skip(err) // the bodies are internal/jsonwire's
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if r, err := Scan(body); err != nil || r.Model == "" {
					b.Fatal(r, err)
				}
			}
		})
	}
}
