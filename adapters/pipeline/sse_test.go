package pipeline

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEvents(t *testing.T) {
	in := ": keep-alive\n\ndata: {\"a\":1}\n\nevent: error\ndata: {\"error\":{}}\n\n" +
		"data: line1\r\ndata: line2\r\n\r\nid: 3\nretry: 10\n\ndata:nospace\n\ndata: " + strings.Repeat("x", 40000) + "\n\ndata: [DONE]\n\ndata: after\n\n"
	ev := NewEvents(strings.NewReader(in))
	var got []string
	for {
		d, err := ev.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, string(d))
	}
	require.Len(t, got, 5)
	assert.Equal(t, []string{`{"a":1}`, `{"error":{}}`, "line1\nline2", "nospace"}, got[:4])
	assert.Len(t, got[4], 40000, "a line longer than the buffer arrives whole")

	// A stream cut without a blank line still yields its last event, then EOF.
	ev = NewEvents(strings.NewReader("data: last"))
	d, err := ev.Next()
	require.NoError(t, err)
	assert.Equal(t, "last", string(d))
	_, err = ev.Next()
	assert.Equal(t, io.EOF, err)
}

// FuzzEvents: any byte stream yields events or an error, never a panic, and no event is longer
// than the input.
func FuzzEvents(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": c\r\ndata:x\r\ndata: y\n\n\n"))
	f.Add([]byte("data"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev := NewEvents(strings.NewReader(string(b)))
		for range len(b) + 1 {
			d, err := ev.Next()
			if err != nil {
				return
			}
			if len(d) > len(b) {
				t.Fatalf("event of %d bytes from %d bytes of input", len(d), len(b))
			}
		}
		t.Fatalf("more events than input bytes")
	})
}
