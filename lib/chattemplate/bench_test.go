package chattemplate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/infergate/infergate/lib/openaiwire"
)

// benchRequest is a chat of about 1,000 tokens (4 KB of text): a system prompt and five turns.
func benchRequest() []byte {
	para := "The gateway renders the model's chat template for every request, so rendering has to stay " +
		"well under a hundred microseconds; this sentence pads the conversation to a realistic size. "
	msgs := []map[string]any{{"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely."}}
	for i := range 5 {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i+1, strings.Repeat(para, 2))},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("Answer %d: %s", i+1, strings.Repeat(para, 2))})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Summarise the above in one sentence."})
	b, _ := json.Marshal(map[string]any{"messages": msgs})
	return b
}

func BenchmarkRender(b *testing.B) {
	td := mustTestdata(b)
	body := benchRequest()
	for _, name := range []string{"qwen3", "llama3_1"} {
		tmpl := td.templates[name]
		in, err := DecodeRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		out, err := tmpl.Render(context.Background(), in)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(out)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.Render(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				in, err := DecodeRequest(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tmpl.Render(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/segments", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tmpl.RenderSegments(context.Background(), in, specialTokens); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBenchRequestSize keeps the benchmark's conversation at about 4 KB of text.
func TestBenchRequestSize(t *testing.T) {
	in, err := DecodeRequest(benchRequest())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range in.Messages {
		n += len(*m.Content)
	}
	if n < 3800 || n > 4600 {
		t.Errorf("%d bytes of content, want about 4 KB", n)
	}
}

// BenchmarkDecodeRequest reads benchRequest's body, as every chat request's context-length check
// does before it renders.
func BenchmarkDecodeRequest(b *testing.B) {
	body := benchRequest()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeBody reads the same request from the pipeline's shared view: "parsed" when a
// stage before has parsed it (the view's parse not counted), "parse" with it. "bytes" is
// DecodeRequest on the same body, the baseline; x-bytes is each one's time over it.
func BenchmarkDecodeBody(b *testing.B) {
	body := benchRequest()
	var base float64
	run := func(name string, fn func() error) float64 {
		var ns float64
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := fn(); err != nil {
					b.Fatal(err)
				}
			}
			ns = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if base > 0 {
				b.ReportMetric(ns/base, "x-bytes")
			}
		})
		return ns
	}
	base = run("bytes", func() error { _, err := DecodeRequest(body); return err })
	w, err := openaiwire.Parse(body)
	if err != nil {
		b.Fatal(err)
	}
	run("parsed", func() error { _, err := DecodeBody(w); return err })
	run("parse", func() error {
		w, err := openaiwire.Parse(body)
		if err != nil {
			return err
		}
		_, err = DecodeBody(w)
		return err
	})
}
