package pipeline

import (
	"bytes"
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

// An output processor rewrites a stream's events on their way out and drops some; [DONE] and the
// usage pass through.
func TestRewriteEvents(t *testing.T) {
	in := NewEventBody([][]byte{[]byte(`{"n":1}`), []byte(`{"drop":true}`), []byte(`{"n":2}`)}, Usage{CompletionTokens: 2})
	out := RewriteEvents(in, func(d []byte) ([]byte, error) {
		if strings.Contains(string(d), "drop") {
			return nil, SkipEvent
		}
		return []byte(strings.ReplaceAll(string(d), "n", "m")), nil
	})
	b, err := io.ReadAll(out)
	require.NoError(t, err)
	assert.Equal(t, "data: {\"m\":1}\n\ndata: {\"m\":2}\n\ndata: [DONE]\n\n", string(b))
	assert.Equal(t, Usage{CompletionTokens: 2}, out.Finish(nil))

	failing := RewriteEvents(NewEventBody([][]byte{[]byte(`{}`)}, Usage{}), func([]byte) ([]byte, error) { return nil, io.ErrUnexpectedEOF })
	_, err = io.ReadAll(failing)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	// A body cut short (no [DONE]) ends without inventing one.
	cut := RewriteEvents(NewBody([]byte("data: {\"n\":1}\n\n"), Usage{}), func(d []byte) ([]byte, error) { return d, nil })
	b, err = io.ReadAll(cut)
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n\n", string(b))
}

// FuzzRewriteEvents: rewriting any byte stream with the identity yields the same events as the
// stream itself (single-line data, as OpenAI's chunks are), and never panics.
func FuzzRewriteEvents(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(": keep-alive\r\ndata:x\r\n\r\ndata: y"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if strings.Contains(string(b), "\n") && strings.Count(string(b), "data") > 64 {
			return
		}
		want := events(NewEvents(strings.NewReader(string(b))))
		out, err := io.ReadAll(RewriteEvents(NewBody(b, Usage{}), func(d []byte) ([]byte, error) {
			if strings.ContainsAny(string(d), "\r\n") {
				return nil, io.ErrUnexpectedEOF // multi-line data: not OpenAI's, compared no further
			}
			return d, nil
		}))
		if err != nil {
			return
		}
		if got := events(NewEvents(strings.NewReader(string(out)))); strings.Join(got, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("events %q became %q", want, got)
		}
	})
}

func events(ev *Events) []string {
	var out []string
	for {
		d, err := ev.Next()
		if err != nil {
			if ev.Done() {
				out = append(out, "[DONE]")
			}
			return out
		}
		out = append(out, string(d))
	}
}

// FuzzEventTap: a tap fed a stream in pieces of any size finds the events Events reads from the
// whole (but for the streams it refuses: an error event, events after [DONE]), never holds more
// than its bound, and ends as when fed the whole at once.
func FuzzEventTap(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), uint8(3))
	f.Add([]byte("data:x\r\ndata: y\r\n\r\n: c\nevent: e\ndata: z"), uint8(1))
	f.Add([]byte("\n\ndata: \n\nid: 1\ndata:a:b\n\n"), uint8(7))
	f.Add([]byte(": ping\r\ndata: {\"choices\":[]}\r\n\r\nevent: error\ndata: {}\n\n"), uint8(1))
	f.Add([]byte("data: [DONE]\n\ndata: {}\n\n"), uint8(7))
	f.Add([]byte("data: x\r\r\r\n\n"), uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, piece uint8) {
		const limit = 256
		var want [][]byte
		ev := NewEvents(bytes.NewReader(stream))
		comparable := true
		for {
			d, err := ev.Next()
			if err != nil {
				comparable = err == io.EOF // else over Events' own bound
				break
			}
			want = append(want, append([]byte(nil), d...))
		}
		tap := func(n int) (*EventTap, [][]byte) {
			var got [][]byte
			tp := NewEventTap(limit, func(d []byte) error {
				got = append(got, append([]byte(nil), d...))
				return nil
			})
			for i := 0; i < len(stream); i += n {
				tp.Write(stream[i:min(i+n, len(stream))])
			}
			tp.End()
			return tp, got
		}
		whole, wholeGot := tap(len(stream) + 1)
		parts, got := tap(int(piece%16) + 1)
		if (whole.Err() == nil) != (parts.Err() == nil) || whole.Done() != parts.Done() || len(wholeGot) != len(got) {
			t.Fatalf("whole: %v %v %d events, in pieces: %v %v %d", whole.Err(), whole.Done(), len(wholeGot), parts.Err(), parts.Done(), len(got))
		}
		if parts.Err() != nil || !comparable {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("got %d events %q, want %d %q", len(got), got, len(want), want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("event %d: %q, want %q", i, got[i], want[i])
			}
		}
	})
}
