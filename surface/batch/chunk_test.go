package batch

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Chunks hold at most the line count and the byte budget, keep every line once and in order,
// and give an oversized line a chunk of its own.
func TestChunker(t *testing.T) {
	line := func(id string, n int) Line { return Line{CustomID: id, Body: []byte(strings.Repeat("x", n))} }
	lines := []Line{line("a", 10), line("b", 10), line("c", 10), line("d", 50), line("e", 100), line("f", 5)}
	var ids [][]string
	c := chunker{maxLines: 2, maxBytes: 60, emit: func(ls []Line) error {
		var cs []string
		for _, l := range ls {
			cs = append(cs, l.CustomID)
		}
		ids = append(ids, cs)
		return nil
	}}
	for _, l := range lines {
		require.NoError(t, c.add(l))
	}
	require.NoError(t, c.flush())
	require.Equal(t, [][]string{{"a", "b"}, {"c", "d"}, {"e"}, {"f"}}, ids)
	ids = nil
	require.NoError(t, c.flush())
	require.Empty(t, ids, "nothing held, nothing emitted")

	// emit's error ends the chunk it was given and comes back from the add that filled it.
	stop := errors.New("stop")
	c = chunker{maxLines: 1, maxBytes: 60, emit: func([]Line) error { return stop }}
	require.NoError(t, c.add(lines[0]))
	require.ErrorIs(t, c.add(lines[1]), stop)
}

// Results are packed into messages under the byte budget; a line over it is set apart.
func TestSplitResults(t *testing.T) {
	line := func(id string, n int) resultLine {
		return resultLine{CustomID: id, Kind: 1, Line: []byte(strings.Repeat("x", n))}
	}
	r := &results{Batch: "b", Results: []resultLine{line("a", 30), line("b", 30), line("c", 100), line("d", 50), line("e", 20)}}
	msgs, big := splitResults(r, 60)
	var ids [][]string
	for _, m := range msgs {
		require.Equal(t, "b", m.Batch)
		var cs []string
		for _, l := range m.Results {
			cs = append(cs, l.CustomID)
		}
		ids = append(ids, cs)
	}
	require.Equal(t, [][]string{{"a", "b"}, {"d"}, {"e"}}, ids)
	require.Len(t, big, 1)
	require.Equal(t, "c", big[0].CustomID)
}

// Bus messages keep HTML characters as they are, so a body does not grow past the size budget.
func TestMessagesDoNotEscapeHTML(t *testing.T) {
	m, err := newMessage("k", chunk{Batch: "b", Endpoint: "/v1/completions", Lines: []Line{{CustomID: "a", Body: []byte(`{"prompt":"<b>&</b>"}`)}}})
	require.NoError(t, err)
	require.Contains(t, string(m.Payload), `"prompt":"<b>&</b>"`)
}

// A chunk encoded by hand decodes to itself, whatever its custom ids hold.
func TestEncodeChunkRoundTrip(t *testing.T) {
	c := chunk{Batch: "batch_1", Endpoint: "/v1/chat/completions", Model: "m\"1", Lines: []Line{
		{CustomID: `a"b\c`, Body: []byte(`{"model":"m\"1","messages":[{"role":"user","content":"<b>é\n</b>"}]}`)},
		{CustomID: "ünï\u2028", Body: []byte(`{ "model" : "m\"1" }`)},
	}}
	got, err := decodeChunk(encodeChunk(&c))
	require.NoError(t, err)
	require.Equal(t, c.Batch, got.Batch)
	require.Equal(t, c.Endpoint, got.Endpoint)
	require.Equal(t, c.Model, got.Model)
	require.Len(t, got.Lines, 2)
	for i := range c.Lines {
		require.Equal(t, c.Lines[i].CustomID, got.Lines[i].CustomID)
		require.JSONEq(t, string(c.Lines[i].Body), string(got.Lines[i].Body))
	}
	require.Zero(t, got.Attempts)
	require.Zero(t, got.NotBefore)

	// A retry keeps its tries and its time.
	c.Attempts, c.NotBefore = 3, 1_790_000_000_123
	got, err = decodeChunk(encodeChunk(&c))
	require.NoError(t, err)
	require.Equal(t, 3, got.Attempts)
	require.EqualValues(t, 1_790_000_000_123, got.NotBefore)
}
