package granitestage

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/llm/granite"

	"github.com/infergate/infergate/adapters/pipeline"
)

var benchBody = []byte(`{"model":"granite","max_tokens":256,"temperature":0.2,"messages":[` +
	`{"role":"system","content":"You are terse."},{"role":"user","content":"What do dogs do? Tell me in two sentences, with sources."}],` +
	`"chat_template_kwargs":{"documents":[{"doc_id":1,"text":"Dogs bark at strangers and wag their tails."},{"doc_id":2,"text":"Cats meow."}],"controls":{"citations":true}}}`)

// BenchmarkDecode is the stage's decoding of a chat body (what it adds before rendering), against
// a baseline of decoding the same body into generic maps, as a stage that only reads it would.
func BenchmarkDecode(b *testing.B) {
	var base time.Duration
	b.Run("baseline_unmarshal", func(b *testing.B) {
		for b.Loop() {
			var v map[string]any
			if err := json.Unmarshal(benchBody, &v); err != nil {
				b.Fatal(err)
			}
		}
		base = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			req, err := pipeline.NewRequest(chatPath, benchBody)
			if err != nil {
				b.Fatal(err)
			}
			f, err := req.Fields()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := decode(f); err != nil {
				b.Fatal(err)
			}
		}
		if base > 0 {
			b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(base), "x_baseline")
		}
	})
}

// BenchmarkStream is a streamed Granite 3.3 thinking answer (about 4,000 characters in 5-byte
// chunks) through the stage, in process, against reading the upstream's own stream: first_ns is
// the time to the first content delta (the baseline's: to the first chunk with answer text),
// all_ns the time to the end; the ratios compare the two.
func BenchmarkStream(b *testing.B) {
	text := "<think>" + strings.Repeat("Consider the seasons one at a time. ", 50) + "</think><response>" +
		strings.Repeat("Limerick won the All-Ireland in 2018, 2020, 2021 and 2022. ", 35) + "</response>"
	var chunks [][]byte
	for i := 0; i < len(text); i += 5 {
		c, _ := json.Marshal(map[string]any{"id": "c", "object": "text_completion", "model": "granite",
			"choices": []any{map[string]any{"index": 0, "text": text[i:min(i+5, len(text))], "finish_reason": nil}}})
		chunks = append(chunks, c)
	}
	answerAt := len(chunks) * strings.Index(text, "<response>") / len(text)
	up := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Stream: true, Body: pipeline.NewEventBody(chunks, pipeline.Usage{})}, nil
	}
	body := []byte(`{"model":"granite","stream":true,"thinking":true,"messages":[{"role":"user","content":"Which titles?"}]}`)
	e, _ := granite.NewDefaultRegistry().Lookup("granite3.3")
	h := Stage(e, Options{})(up)
	run := func(b *testing.B, h pipeline.Handler, first func(data []byte, n int) bool) (firstNs, allNs float64) {
		var firstSum, allSum time.Duration
		for b.Loop() {
			start := time.Now()
			req, err := pipeline.NewRequest(chatPath, body)
			if err != nil {
				b.Fatal(err)
			}
			res, err := h(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			ev := pipeline.NewEvents(res.Body)
			seen := false
			for n := 0; ; n++ {
				data, err := ev.Next()
				if err != nil {
					break
				}
				if !seen && first(data, n) {
					seen = true
					firstSum += time.Since(start)
				}
			}
			res.Body.Finish(nil)
			allSum += time.Since(start)
		}
		return float64(firstSum) / float64(b.N), float64(allSum) / float64(b.N)
	}
	var baseFirst, baseAll float64
	b.Run("baseline_upstream", func(b *testing.B) {
		baseFirst, baseAll = run(b, up, func(_ []byte, n int) bool { return n > answerAt })
		b.ReportMetric(baseFirst, "first_ns")
		b.ReportMetric(baseAll, "all_ns")
	})
	b.Run("granite_stream", func(b *testing.B) {
		first, all := run(b, h, func(data []byte, _ int) bool { return bytes.Contains(data, []byte(`"content":"L`)) })
		b.ReportMetric(first, "first_ns")
		b.ReportMetric(all, "all_ns")
		if baseFirst > 0 {
			b.ReportMetric(first/baseFirst, "first_x_baseline")
			b.ReportMetric(all/baseAll, "all_x_baseline")
		}
	})
}
