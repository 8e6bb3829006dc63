package tokeninput

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/tokenizer"
)

// FuzzChatStream: whatever an upstream streams, the conversion never panics and sends only
// events whose data is a JSON object or [DONE], with no text after a choice's stop string.
func FuzzChatStream(f *testing.F) {
	tok, err := tokenizer.Load("../../lib/tokenizer/testdata/qwen3")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"Hello EN\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"D x\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"), "END", 1)
	f.Add([]byte("data: {\"choices\":[{\"index\":1,\"token_ids\":[151644,240,159]}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n"), "", 2)
	f.Add([]byte("data: {\"error\":{\"message\":\"boom\"}}\n\n"), "x", 1)
	f.Add([]byte("data: [1,2]\n\n"), "", 1)
	f.Fuzz(func(t *testing.T, upstream []byte, stop string, n int) {
		p := &params{n: max(1, n%4), tok: tok, includeUsage: true, promptLen: 3}
		if stop != "" {
			p.stop = []string{stop}
		}
		s := newChatStream(pipeline.NewBody(upstream, pipeline.Usage{Status: 200}), p)
		out, err := io.ReadAll(io.LimitReader(s, 1<<20))
		s.Finish(nil)
		if err != nil && err != errBadChunk {
			t.Fatalf("read: %v", err)
		}
		for _, ev := range strings.Split(string(out), "\n\n") {
			data, ok := strings.CutPrefix(ev, "data: ")
			if ev == "" || data == "[DONE]" {
				continue
			}
			var obj map[string]json.RawMessage
			if !ok || json.Unmarshal([]byte(data), &obj) != nil {
				t.Fatalf("not a JSON event: %q", ev)
			}
			if stop == "" {
				continue
			}
			var c struct {
				Choices []struct {
					Delta struct {
						Content *string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if json.Unmarshal([]byte(data), &c) == nil {
				for _, ch := range c.Choices {
					if ch.Delta.Content != nil && strings.Contains(*ch.Delta.Content, stop) {
						t.Fatalf("a delta holds the stop string %q: %q", stop, *ch.Delta.Content)
					}
				}
			}
		}
	})
}
