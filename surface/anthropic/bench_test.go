package anthropic

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// discard is a ResponseWriter that keeps nothing, with a Flush: the client's side of a benchmark.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) Flush()                      {}

// A request as an agent sends it: a system prompt, a tool, a three-turn conversation with a tool
// call and its result (about 2.5 KB), and the same request as an OpenAI client would send it.
var (
	benchAnthropic = []byte(`{"model":"llama","max_tokens":1024,"temperature":0.3,"system":[{"type":"text","text":"You are a careful assistant. Answer briefly and cite the tool's results when you use them. ` + filler + `"}],` +
		`"tools":[{"name":"get_weather","description":"Current weather for a city","input_schema":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}],` +
		`"messages":[{"role":"user","content":"What is the weather in Paris, and should I take an umbrella? ` + filler + `"},` +
		`{"role":"assistant","content":[{"type":"text","text":"Let me check the weather in Paris."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris","unit":"c"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"Light rain, 14C, wind 20 km/h from the west."}]}]}`)
	benchOpenAI = []byte(`{"model":"llama","max_tokens":1024,"temperature":0.3,"messages":[{"role":"system","content":"You are a careful assistant. Answer briefly and cite the tool's results when you use them. ` + filler + `"},` +
		`{"role":"user","content":"What is the weather in Paris, and should I take an umbrella? ` + filler + `"},` +
		`{"role":"assistant","content":"Let me check the weather in Paris.","tool_calls":[{"id":"toolu_01","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},` +
		`{"role":"tool","tool_call_id":"toolu_01","content":"Light rain, 14C, wind 20 km/h from the west."}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}}]}`)
	benchAnswer = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":"Yes: light rain and 14C in Paris, so take an umbrella.","tool_calls":[]},"finish_reason":"stop"}],"usage":{"prompt_tokens":412,"completion_tokens":15,"total_tokens":427}}` + "\n")
)

const filler = "Keep answers short; prefer metric units; never invent data the tools did not return; say so when unsure. " +
	"Keep answers short; prefer metric units; never invent data the tools did not return; say so when unsure. " +
	"Keep answers short; prefer metric units; never invent data the tools did not return; say so when unsure."

// benchChat is the chat handler of the benchmarks: it reads the body and answers a fixed
// completion, as the gateway's handler would after a cache hit: what is measured is the
// translation around it.
var benchChat = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "bench")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(benchAnswer)
})

func benchRequest(path string, body []byte) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://gw"+path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Api-Key", "k")
	r.Header.Set("Anthropic-Version", "2023-06-01")
	r.Header.Set("X-Request-Id", "bench")
	r.ContentLength = int64(len(body))
	return r
}

// BenchmarkRequest: a whole request through the Handler (translate, the chat handler, translate
// back) against the same request sent to the chat handler as OpenAI JSON (the gateway's plain
// forwarding, less the upstream). overhead-us is the translation's cost per request; goal < 30.
// Most of it was allocation and the collector (97 allocs/op, 13.3 KB/op before the pooled
// decoder and buffers; 49 and 7.6 KB after, of which about 24 are this loop's own requests):
// watch allocs/op and B/op, which a loaded machine does not blur.
func BenchmarkRequest(b *testing.B) {
	h := New(Options{Chat: benchChat})
	w := &discard{h: http.Header{}}
	var base, tr time.Duration
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		r := benchRequest("/v1/chat/completions", benchOpenAI)
		t0 := time.Now()
		benchChat.ServeHTTP(w, r)
		t1 := time.Now()
		clear(w.h)
		r = benchRequest("/v1/messages", benchAnthropic)
		t2 := time.Now()
		h.ServeHTTP(w, r)
		tr += time.Since(t2)
		base += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(base.Nanoseconds())/n/1e3, "openai-us")
	b.ReportMetric(float64(tr.Nanoseconds())/n/1e3, "anthropic-us")
	b.ReportMetric(float64((tr-base).Nanoseconds())/n/1e3, "overhead-us")
	b.ReportMetric(float64(tr)/float64(max(base, 1)), "ratio")
}

// BenchmarkTranslateOnly: the request translation alone (decode, validate, write OpenAI JSON).
func BenchmarkTranslateOnly(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchAnthropic)))
	for b.Loop() {
		if _, err := translate(benchAnthropic, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamChunk: a 256-chunk answer stream written into the translating writer, against
// the same bytes written straight to the client (what the gateway does for an OpenAI client).
// overhead-ns is the translation's cost per chunk; goal < 2000.
func BenchmarkStreamChunk(b *testing.B) {
	const chunks = 256
	var stream [][]byte
	for i := range chunks {
		stream = append(stream, fmt.Appendf(nil, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"llama","choices":[{"index":0,"delta":{"content":" token%d"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i))
	}
	stream = append(stream, []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"llama","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"),
		[]byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"llama","choices":[],"usage":{"prompt_tokens":412,"completion_tokens":256,"total_tokens":668}}`+"\n\ndata: [DONE]\n\n"))
	client := &discard{h: http.Header{}}
	var base, tr time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for _, c := range stream {
			_, _ = client.Write(c)
			client.Flush()
		}
		t1 := time.Now()
		clear(client.h)
		cw := &chatWriter{w: client, h: http.Header{"Content-Type": {"text/event-stream"}}, stream: true, id: "msg_bench", model: "llama", estimate: 400, reqID: "bench"}
		cw.WriteHeader(http.StatusOK)
		for _, c := range stream {
			_, _ = cw.Write(c)
			cw.Flush()
		}
		cw.finish(false)
		tr += time.Since(t1)
		base += t1.Sub(t0)
		if cw.out != outcomeOK {
			b.Fatal(cw.out)
		}
	}
	per := float64(b.N) * float64(len(stream))
	b.ReportMetric(float64(base.Nanoseconds())/per, "openai-ns/chunk")
	b.ReportMetric(float64(tr.Nanoseconds())/per, "anthropic-ns/chunk")
	b.ReportMetric(float64((tr-base).Nanoseconds())/per, "overhead-ns/chunk")
	b.ReportMetric(float64(tr)/float64(max(base, 1)), "ratio")
}
