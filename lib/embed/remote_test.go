package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeEmbeddings is an OpenAI-compatible /v1/embeddings server over a real
// socket. Each text's vector is its lexical embedding at dim 16 times 3 (so
// the client must normalise), and data comes back in reverse order (so the
// client must match by index).
type fakeEmbeddings struct {
	srv      *httptest.Server
	requests atomic.Int64
	mu       sync.Mutex
	sizes    []int
	fail     atomic.Bool   // answer 500
	block    chan struct{} // if set, handlers wait on it or on the request's end
	canceled atomic.Int64  // requests whose context ended while blocked
}

func newFake(t *testing.T) *fakeEmbeddings {
	f := &fakeEmbeddings{}
	lex := NewLexical(16)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f.requests.Add(1)
		var in struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if req.URL.Path != "/v1/embeddings" || json.NewDecoder(req.Body).Decode(&in) != nil || in.Model != "emb" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.sizes = append(f.sizes, len(in.Input))
		f.mu.Unlock()
		if f.block != nil {
			select {
			case <-f.block:
			case <-req.Context().Done():
				f.canceled.Add(1)
				return
			}
		}
		if f.fail.Load() {
			http.Error(w, `{"error":{"message":"model overloaded"}}`, http.StatusInternalServerError)
			return
		}
		vecs, _ := lex.Embed(req.Context(), in.Input)
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i := len(vecs) - 1; i >= 0; i-- {
			v := slices.Clone(vecs[i])
			for j := range v {
				v[j] *= 3
			}
			data = append(data, item{"embedding", i, v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": in.Model,
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// post is what the gateway wiring does: one POST, a bounded read, non-2xx
// as an error.
func (f *fakeEmbeddings) post(ctx context.Context, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// want is the vector the fake server's answer must normalise back to.
func want(t *testing.T, text string) []float32 {
	v, err := NewLexical(16).Embed(context.Background(), []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func sameVec(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			return false
		}
	}
	return true
}

// TestRemoteBatching: 64 concurrent callers, batches of 16 that never time
// out, so batching alone decides the request count: exactly 4.
func TestRemoteBatching(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxBatch: 16, MaxWait: time.Hour})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			text := fmt.Sprintf("question number %d about topic %d", i, i%7)
			v, err := r.Embed(context.Background(), []string{text})
			if err != nil {
				errs <- err
				return
			}
			if len(v) != 1 || !sameVec(v[0], want(t, text)) {
				errs <- fmt.Errorf("caller %d got another text's vector", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := f.requests.Load(); n != 4 {
		t.Fatalf("%d requests for 64 callers in batches of 16, want 4", n)
	}
}

// TestRemoteMaxWait: a lone caller is sent after MaxWait, not MaxBatch.
func TestRemoteMaxWait(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxWait: time.Millisecond})
	v, err := r.Embed(context.Background(), []string{"hello there"})
	if err != nil || len(v) != 1 || !sameVec(v[0], want(t, "hello there")) {
		t.Fatalf("Embed = %v, %v", v, err)
	}
	if v, err := r.Embed(context.Background(), nil); err != nil || len(v) != 0 {
		t.Fatalf("Embed(nil) = %v, %v", v, err)
	}
}

// TestRemoteLongList: a caller with more texts than MaxBatch is split into
// several requests and gets its vectors back in order.
func TestRemoteLongList(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxBatch: 16, MaxWait: time.Millisecond})
	var texts []string
	for i := range 40 {
		texts = append(texts, fmt.Sprintf("text %d", i))
	}
	v, err := r.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		if !sameVec(v[i], want(t, text)) {
			t.Fatalf("vector %d is not text %d's", i, i)
		}
	}
	if n := f.requests.Load(); n != 3 {
		t.Fatalf("%d requests for 40 texts in batches of 16, want 3", n)
	}
}

// TestRemoteErrorFanOut: a failed request fails every caller of its batch.
func TestRemoteErrorFanOut(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.fail.Store(true)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxBatch: 8, MaxWait: time.Hour})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			_, err := r.Embed(context.Background(), []string{fmt.Sprint("t", i)})
			if err != nil && strings.Contains(err.Error(), "model overloaded") {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 8 || f.requests.Load() != 1 {
		t.Fatalf("%d of 8 callers saw the error, %d requests; want 8 and 1", failed.Load(), f.requests.Load())
	}
}

// waitOpen waits until the open batch holds n texts.
func waitOpen(r *Remote, n int) {
	for {
		r.mu.Lock()
		got := 0
		if r.cur != nil {
			got = len(r.cur.texts)
		}
		r.mu.Unlock()
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemoteCallerLeaves: a caller whose ctx ends while its batch forms
// returns its ctx error; the batch still goes out for the others.
func TestRemoteCallerLeaves(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxBatch: 3, MaxWait: time.Hour})
	stayed := make(chan error, 1)
	go func() {
		v, err := r.Embed(context.Background(), []string{"first"})
		if err == nil && !sameVec(v[0], want(t, "first")) {
			err = errors.New("wrong vector")
		}
		stayed <- err
	}()
	waitOpen(r, 1)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := r.Embed(ctx, []string{"leaving"})
		left <- err
	}()
	waitOpen(r, 2)
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the leaving caller got %v, want context.Canceled", err)
	}
	// A deadline turns a dropped batch (the bug this test is for) into a
	// failure instead of a hang.
	dl, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	v, err := r.Embed(dl, []string{"last"}) // fills the batch
	if err != nil || !sameVec(v[0], want(t, "last")) {
		t.Fatalf("the last caller got %v, %v", v, err)
	}
	if err := <-stayed; err != nil {
		t.Fatalf("the first caller got %v", err)
	}
	if n := f.requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// TestRemoteAllLeave: when every caller of an in-flight request has left,
// the request is cancelled.
func TestRemoteAllLeave(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.block = make(chan struct{})
	defer close(f.block)
	r := NewRemote(RemoteOptions{Model: "emb", Post: f.post, MaxBatch: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.Embed(ctx, []string{"x"})
		done <- err
	}()
	for f.requests.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Embed = %v, want context.Canceled", err)
	}
	for f.canceled.Load() == 0 {
		time.Sleep(time.Millisecond) // the server sees the request end
	}
}

func TestRemoteNoPost(t *testing.T) {
	t.Parallel()
	if _, err := NewRemote(RemoteOptions{Model: "m"}).Embed(context.Background(), []string{"a"}); err == nil {
		t.Fatal("Embed without Post succeeded")
	}
	if got := NewRemote(RemoteOptions{Model: "bge"}).Name(); got != "remote/bge" {
		t.Fatalf("Name() = %q", got)
	}
}

func TestParseEmbeddings(t *testing.T) {
	t.Parallel()
	ok := `{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}`
	v, err := parseEmbeddings([]byte(ok), 2, 8)
	if err != nil || !sameVec(v[0], []float32{0.6, 0.8}) || !sameVec(v[1], []float32{0, 1}) {
		t.Fatalf("parse = %v, %v", v, err)
	}
	bad := map[string]string{
		"count":         `{"data":[{"index":0,"embedding":[1]}]}`,
		"dims":          `{"data":[{"index":0,"embedding":[1,0]},{"index":1,"embedding":[1]}]}`,
		"duplicate":     `{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}`,
		"range":         `{"data":[{"index":0,"embedding":[1]},{"index":2,"embedding":[1]}]}`,
		"no index":      `{"data":[{"index":0,"embedding":[1]},{"embedding":[1]}]}`,
		"zero":          `{"data":[{"index":0,"embedding":[0]},{"index":1,"embedding":[1]}]}`,
		"empty":         `{"data":[{"index":0,"embedding":[]},{"index":1,"embedding":[]}]}`,
		"overflow":      `{"data":[{"index":0,"embedding":[1e39]},{"index":1,"embedding":[1]}]}`,
		"too long":      `{"data":[{"index":0,"embedding":[1,1,1,1,1,1,1,1,1]},{"index":1,"embedding":[1,1,1,1,1,1,1,1,1]}]}`,
		"error":         `{"error":{"message":"no such model"}}`,
		"base64":        `{"data":[{"index":0,"embedding":"AAAA"},{"index":1,"embedding":"AAAA"}]}`,
		"not json":      `<html>`,
		"huge envelope": `{"data":[],"pad":"` + strings.Repeat("x", maxResponseBytes(2, 8)) + `"}`,
	}
	for name, body := range bad {
		if _, err := parseEmbeddings([]byte(body), 2, 8); err == nil {
			t.Errorf("%s: accepted %.80s", name, body)
		}
	}
}
