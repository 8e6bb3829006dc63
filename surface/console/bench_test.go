package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/guard"
)

// nopWriter is a ResponseWriter that costs nothing, so the benchmark measures the recorder.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// fakeBody is an upstream answer of one read.
type fakeBody struct{ read bool }

func (b *fakeBody) Read(p []byte) (int, error) {
	if b.read {
		return 0, io.EOF
	}
	b.read = true
	return copy(p, "data: {}\n\n"), nil
}
func (b *fakeBody) Finish(error) pipeline.Usage {
	return pipeline.Usage{PromptTokens: 12, CompletionTokens: 40, Status: 200}
}
func (b *fakeBody) Err() error { return nil }

// BenchmarkRecord is what the console's recorder adds to a request with an API key, against the
// same request without it, in the same process: an HTTP request through HTTP and HTTPKey (status
// recorder, two clock reads, the overview's and the key's rings), an LLM request through Stage
// (its answer read and finished: the model's, the overview's and the key's rings), and the two
// together as a chat request over HTTP pays them (chat: the whole per-request cost, which the
// issue bounds at 1 µs). It reports the ratio, the nanoseconds added, and the recorder's fixed
// memory in bytes.
func BenchmarkRecord(b *testing.B) {
	rc := NewRecorder()

	var bare, recorded float64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	// A request with an API key: the key's ring is recorded too.
	req, _ := http.NewRequestWithContext(guard.WithPrincipal(context.Background(), &guard.Principal{Name: "team-a"}),
		http.MethodPost, "http://gateway/v1/chat/completions", nil)
	runHTTP := func(name string, h http.Handler, out, baseline *float64) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			w := &nopWriter{h: http.Header{}}
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
			*out = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			report(b, name, baseline, *out, rc)
		}
	}
	b.Run("http/baseline", runHTTP("http", handler, &bare, nil))
	b.Run("http/recorded", runHTTP("http", rc.HTTP(rc.HTTPKey(handler)), &recorded, &bare))

	var lbare, lrec float64
	next := func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Stream: true, Body: &fakeBody{}}, nil
	}
	runLLM := func(h pipeline.Handler, out, baseline *float64) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			preq, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","stream":true}`))
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 64)
			ctx := guard.WithPrincipal(context.Background(), &guard.Principal{Name: "team-a"})
			for b.Loop() {
				res, err := h(ctx, preq)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := res.Body.Read(buf); err != nil {
						break
					}
				}
				res.Body.Finish(nil)
			}
			*out = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			report(b, "llm", baseline, *out, rc)
		}
	}
	b.Run("llm/baseline", runLLM(next, &lbare, nil))
	b.Run("llm/recorded", runLLM(rc.Stage("m")(next), &lrec, &lbare))

	// A chat request over HTTP, whole: the transport's two middlewares around a handler that,
	// as the OpenAI surface does, stamps the request's arrival, runs the model's chain (with the
	// meter first in it, when recorded), and writes the answer out as it reads it.
	chat := func(chain pipeline.Handler) http.Handler {
		preq, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","stream":true}`))
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 64)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			preq.Start = time.Now() // the surface's own clock read: the meter times from it
			res, err := chain(r.Context(), preq)
			if err != nil {
				// next never fails; and b is the parent's, whose Fatal this goroutine may not call
				panic(fmt.Errorf("the chain failed: %w", err))
			}
			w.WriteHeader(res.StatusCode)
			for {
				n, err := res.Body.Read(buf)
				_, _ = w.Write(buf[:n])
				if err != nil {
					break
				}
			}
			res.Body.Finish(nil)
		})
	}
	var cbare, crec float64
	b.Run("chat/baseline", runHTTP("chat", chat(next), &cbare, nil))
	b.Run("chat/recorded", runHTTP("chat", rc.HTTP(rc.HTTPKey(chat(rc.Stage("m")(next)))), &crec, &cbare))

	// Contention: every core recording at once into the same rings.
	b.Run("http/recorded-parallel", func(b *testing.B) {
		h := rc.HTTP(rc.HTTPKey(handler))
		b.RunParallel(func(pb *testing.PB) {
			w := &nopWriter{h: http.Header{}}
			for pb.Next() {
				h.ServeHTTP(w, req)
			}
		})
	})
}

// report adds, to a recorded run, its ratio to the baseline run before it, the nanoseconds the
// recorder added, and the recorder's fixed memory; a baseline run (baseline nil) reports nothing.
func report(b *testing.B, name string, baseline *float64, recorded float64, rc *Recorder) {
	if baseline == nil || *baseline <= 0 || recorded <= 0 {
		return
	}
	bare := *baseline
	b.ReportMetric(recorded/bare, "recorded/baseline")
	b.ReportMetric(recorded-bare, "added-ns")
	b.ReportMetric(float64(rc.Bytes()), "fixed-bytes")
	fmt.Printf("%s: baseline %.0f ns/op, recorded %.0f ns/op, ratio %.2f, added %.0f ns per request, fixed memory %d bytes\n",
		name, bare, recorded, recorded/bare, recorded-bare, rc.Bytes())
}
