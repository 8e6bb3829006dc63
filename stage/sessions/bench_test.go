package sessions_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/sessions"
)

// canned answers every request at once, as a cached upstream would: the stage's own cost is
// what the benchmarks measure.
func canned(stream bool) pipeline.Handler {
	whole := []byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("word ", 60) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":60,"total_tokens":61}}`)
	var chunks [][]byte
	chunks = append(chunks, []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`))
	for range 60 {
		chunks = append(chunks, []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}`))
	}
	chunks = append(chunks, []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	return func(_ context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		if stream {
			return &pipeline.Response{StatusCode: http.StatusOK, Stream: true, Endpoint: "e1", Body: pipeline.NewEventBody(chunks, pipeline.Usage{})}, nil
		}
		return &pipeline.Response{StatusCode: http.StatusOK, Endpoint: "e1", Body: pipeline.NewBody(whole, pipeline.Usage{})}, nil
	}
}

func drain(b *testing.B, h pipeline.Handler, header http.Header, body []byte) {
	req, err := pipeline.NewRequest("/v1/chat/completions", body)
	if err != nil {
		b.Fatal(err)
	}
	req.Header = header
	res, err := h(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, res); err != nil {
		b.Fatal(err)
	}
	res.Body.Finish(nil)
}

// BenchmarkTurn is a session turn with 10 turns of history (about 6 KB), against the same
// request sent without a session (ratio = turn / plain). The history stays 10 turns long
// (MaxMessages), trimmed to a window with the estimate.
func BenchmarkTurn(b *testing.B) {
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%v", stream), func(b *testing.B) {
			store := sessions.NewMemory(sessions.MemoryOptions{})
			mgr := sessions.New(sessions.Options{Store: store,
				Models: map[string]sessions.ModelOptions{"m": {MaxMessages: 21, ContextWindow: 8192}}})
			h := pipeline.Chain(canned(stream), mgr.Interceptor("m"))
			plain := canned(stream)
			id := sessions.NewID()
			now := time.Now()
			if err := store.Create(context.Background(), &sessions.Session{ID: id, Model: "m", Created: now, Expires: now.Add(time.Hour), TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
			body := []byte(fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":100,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":%q}]}`,
				stream, strings.Repeat("What is the capital of France? ", 8)))
			hdr := http.Header{sessions.HeaderSessionID: {id}}
			for range 12 { // fill the history
				drain(b, h, hdr, body)
			}
			const base = 200
			start := time.Now()
			for range base {
				drain(b, plain, nil, body)
			}
			plainNs := float64(time.Since(start).Nanoseconds()) / base
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				drain(b, h, hdr, body)
			}
			b.StopTimer()
			turnNs := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(turnNs/plainNs, "ratio")
			b.ReportMetric(plainNs, "plain-ns/op")
		})
	}
}

// BenchmarkPassThrough is a request of a model with sessions that names none, against the same
// without the stage: what every other request of such a model pays.
func BenchmarkPassThrough(b *testing.B) {
	mgr := sessions.New(sessions.Options{Store: sessions.NewMemory(sessions.MemoryOptions{}),
		Models: map[string]sessions.ModelOptions{"m": {}}})
	h := pipeline.Chain(canned(false), mgr.Interceptor("m"))
	plain := canned(false)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 200) + `"}]}`)
	hdr := http.Header{"Authorization": {"Bearer x"}}
	const base = 2000
	start := time.Now()
	for range base {
		drain(b, plain, hdr, body)
	}
	plainNs := float64(time.Since(start).Nanoseconds()) / base
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		drain(b, h, hdr, body)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/plainNs, "ratio")
}
