package granitestage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/lib/granite"

	"github.com/infergate/infergate/core/pipeline"
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

// citedAnswer is the ~4,000-character Granite 3.2 answer with citations and hallucinations of
// runtime's BenchmarkGraniteRoundTrip, with the request that asks for it.
func citedAnswer() (answer string, body []byte) {
	var b strings.Builder
	for i := 0; b.Len() < 3600; i++ {
		fmt.Fprintf(&b, "Limerick won the title in season number %d of the decade, as the records show <co>%d</co>. ", i, i%3+1)
	}
	b.WriteString("\n\n# Citations:\n")
	docs := []string{"Limerick won the All-Ireland hurling final in 2018 after a long wait.",
		"Limerick retained the title in 2020 and 2021 under John Kiely.",
		"In 2022 Limerick completed three in a row against Kilkenny."}
	var docJSON []string
	for i, d := range docs {
		fmt.Fprintf(&b, "<co>%d</co> Document %d: \"%s\"\n", i+1, i, d[:40])
		docJSON = append(docJSON, fmt.Sprintf(`{"title":"doc %d","text":%q}`, i, d))
	}
	b.WriteString("\n# Hallucinations:\n1. Risk low: Limerick won the title in season number 0 of the decade, as the records show.\n")
	body = []byte(`{"model":"granite","max_tokens":1024,"messages":[{"role":"user","content":"Who won the hurling?"}],` +
		`"documents":[` + strings.Join(docJSON, ",") + `],"controls":{"citations":true,"hallucinations":true}}`)
	return b.String(), body
}

// BenchmarkChat is the stage's whole cost for one chat completion, in process: decode the chat
// request, render the Granite 3.2 prompt with documents, build the completion request, read the
// upstream's 4,000-character answer with citations and hallucinations (JSON as encoding/json
// writes it, as openaitest's upstream does), parse it and write the chat answer. The baseline
// forwards the same exchange as plain chat (read the request's routing fields, read the upstream's
// chat answer through), which is what a model without a processor costs here. added_ns is the
// stage's cost per request; compare it with runtime's BenchmarkGraniteRoundTrip round trip.
func BenchmarkChat(b *testing.B) {
	answer, body := citedAnswer()
	text, _ := json.Marshal(answer)
	completion := fmt.Appendf(nil, `{"id":"cmpl-up","object":"text_completion","created":1700000000,"model":"granite","choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}`, text)
	chat := fmt.Appendf(nil, `{"id":"chatcmpl-up","object":"chat.completion","created":1700000000,"model":"granite","choices":[{"index":0,"message":{"role":"assistant","content":%s,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4},"prompt_logprobs":null}`, text)
	upstream := func(answer []byte) pipeline.Handler {
		return func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			return &pipeline.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: pipeline.NewBody(answer, pipeline.Usage{PromptTokens: 7, CompletionTokens: 4})}, nil
		}
	}
	e, _ := granite.NewDefaultRegistry().Lookup("granite3.2")
	stage := Stage(e, Options{NewID: func() string { return "chatcmpl-1" }})(upstream(completion))
	run := func(b *testing.B, h pipeline.Handler) float64 {
		b.ReportAllocs()
		for b.Loop() {
			req, err := pipeline.NewRequest(chatPath, body)
			if err != nil {
				b.Fatal(err)
			}
			res, err := h(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			out, err := io.ReadAll(res.Body)
			res.Body.Finish(nil)
			if err != nil || res.StatusCode != 200 || len(out) < len(answer)/2 {
				b.Fatalf("HTTP %d %v: %.300s", res.StatusCode, err, out)
			}
		}
		return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	}
	var base float64
	b.Run("baseline_forward", func(b *testing.B) { base = run(b, upstream(chat)) })
	b.Run("granite3.2", func(b *testing.B) {
		ns := run(b, stage)
		if base > 0 {
			b.ReportMetric(ns/base, "x_baseline")
			b.ReportMetric(ns-base, "added_ns")
		}
	})
}
