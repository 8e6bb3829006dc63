package batch

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Chunks hold at most the line count and the byte budget, keep every line once and in order,
// and give an oversized line a chunk of its own.
func TestChunkLines(t *testing.T) {
	line := func(id string, n int) Line { return Line{CustomID: id, Body: []byte(strings.Repeat("x", n))} }
	lines := []Line{line("a", 10), line("b", 10), line("c", 10), line("d", 50), line("e", 100), line("f", 5)}
	got := chunkLines(lines, 2, 60)
	var ids [][]string
	for _, c := range got {
		var cs []string
		for _, l := range c {
			cs = append(cs, l.CustomID)
		}
		ids = append(ids, cs)
	}
	require.Equal(t, [][]string{{"a", "b"}, {"c", "d"}, {"e"}, {"f"}}, ids)
	require.Empty(t, chunkLines(nil, 2, 60))
}
