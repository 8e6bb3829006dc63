// Package openaitest is a fake vLLM server for tests and benchmarks: OpenAI's /v1/models,
// /v1/chat/completions, /v1/completions and /v1/embeddings (SSE streaming with a configurable
// chunk count and gap), vLLM's /tokenize and /detokenize (one token per byte), /health and
// /metrics, on a real loopback socket, with injected failures: an HTTP status, refused
// connections, and dying mid-stream. Beside it, the client side of the tests that put a gateway
// in front of fakes (client.go): the fake as an endpoint, small HTTP calls, a benchmark's client.
package openaitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Upstream is a running fake server. Its knobs are safe to change while it serves.
type Upstream struct {
	Name   string
	Models []string
	URL    string // http://127.0.0.1:port, without /v1
	addr   string

	mu       sync.Mutex
	srv      *http.Server
	chunks   int
	gap      time.Duration
	failWith int
	dieAfter int // chunks sent before the connection is cut; -1: never
	healthy  bool
	gate     chan struct{}
	lastBody []byte
	lastHdr  http.Header
	lastQry  string
	reply    string
	latency  time.Duration
	endHold  time.Duration  // how long a stream's body stays open after its [DONE]
	stamp    bool           // a stream chunk's content is the time it is written
	failOn   map[string]int // body substring -> status

	requests atomic.Int64 // POSTs to /v1/*
	tokenize atomic.Int64 // POSTs to /tokenize and /detokenize
	canceled atomic.Int64 // requests whose client went away before the response ended
	inflight atomic.Int64
	peak     atomic.Int64  // most requests in flight at once
	started  chan struct{} // receives one value per POST that reached the handler
}

// Start serves a fake named name with the given models on 127.0.0.1 until tb ends. Streams have
// 4 chunks with no gap until SetStream changes that.
func Start(tb testing.TB, name string, models ...string) *Upstream {
	tb.Helper()
	u := &Upstream{Name: name, Models: models, chunks: 4, dieAfter: -1, healthy: true, started: make(chan struct{}, 1024)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.URL = "http://" + u.addr
	u.serve(ln)
	tb.Cleanup(u.Stop)
	return u
}

func (u *Upstream) serve(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", u.health)
	mux.HandleFunc("GET /v1/models", u.models)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "vllm:num_requests_running %d\nvllm:num_requests_waiting 0\n", u.inflight.Load())
	})
	mux.HandleFunc("POST /v1/chat/completions", u.generate)
	mux.HandleFunc("POST /v1/completions", u.generate)
	mux.HandleFunc("POST /v1/embeddings", u.embeddings)
	for _, path := range openaiPoolingPaths {
		mux.HandleFunc("POST "+path, u.pooling)
	}
	mux.HandleFunc("POST /tokenize", u.tokenizeHandler)
	mux.HandleFunc("POST /detokenize", u.tokenizeHandler)
	srv := &http.Server{Handler: mux, ErrorLog: nil}
	u.mu.Lock()
	u.srv = srv
	u.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop closes the listener and every connection: requests now fail with connection refused.
func (u *Upstream) Stop() {
	u.mu.Lock()
	srv := u.srv
	u.srv = nil
	u.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart listens again on the same address after Stop.
func (u *Upstream) Restart(tb testing.TB) {
	tb.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port can take a moment to be free again
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		tb.Fatal(err)
	}
	u.serve(ln)
}

// SetStream sets how many content chunks a stream has and the gap between two chunks (the
// first is sent at once).
func (u *Upstream) SetStream(chunks int, gap time.Duration) {
	u.mu.Lock()
	u.chunks, u.gap = chunks, gap
	u.mu.Unlock()
}

// HoldEnd makes a stream's body end d after its "data: [DONE]" event is sent, as a server's
// last chunk can reach the gateway apart from the event before it: whatever reads the stream
// sees the [DONE] well before its body's end.
func (u *Upstream) HoldEnd(d time.Duration) {
	u.mu.Lock()
	u.endHold = d
	u.mu.Unlock()
}

// StampChunks makes each content chunk of a stream the time it is written, in Unix
// nanoseconds, as a JSON string: a client in the same process reads it back with ChunkStamp, for
// how long the chunk took to reach it.
func (u *Upstream) StampChunks(on bool) {
	u.mu.Lock()
	u.stamp = on
	u.mu.Unlock()
}

// ChunkStamp is the write time a stamped content chunk's event line carries (StampChunks); not
// ok for any other line. It finds the content by its bytes, not with openaiwire.DecodeChunk:
// the benchmarks that read it share one process (and its collector) with the gateway they
// time, and decoding every chunk doubled BenchmarkProxyStream's allocations and moved both of
// its arms' one-way times by 10 µs and more.
func ChunkStamp(line []byte) (time.Time, bool) {
	_, rest, ok := bytes.Cut(line, []byte(`"content":"`))
	if !ok {
		return time.Time{}, false
	}
	digits, _, ok := bytes.Cut(rest, []byte(`"`))
	ns, err := strconv.ParseInt(string(digits), 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// SetReply makes answers carry text: a non-streaming answer as its content, a stream spelled out
// over its content chunks (so the chunks concatenate to the non-streaming answer). "" restores
// the defaults, "Hello from <name>" and chunks "tok<i> ".
func (u *Upstream) SetReply(text string) {
	u.mu.Lock()
	u.reply = text
	u.mu.Unlock()
}

// FailWith makes every /v1 POST answer status with a vLLM-style error body; 0 stops it.
func (u *Upstream) FailWith(status int) {
	u.mu.Lock()
	u.failWith = status
	u.mu.Unlock()
}

// SetLatency makes every /v1 POST wait d before it is answered (a model's compute time).
func (u *Upstream) SetLatency(d time.Duration) {
	u.mu.Lock()
	u.latency = d
	u.mu.Unlock()
}

// FailBodiesContaining makes /v1 POSTs whose body contains substr answer status with a
// vLLM-style error body (one bad request among good ones); status 0 removes the rule.
func (u *Upstream) FailBodiesContaining(substr string, status int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failOn == nil {
		u.failOn = map[string]int{}
	}
	if status == 0 {
		delete(u.failOn, substr)
		return
	}
	u.failOn[substr] = status
}

// SetHealthy sets whether /health answers 200 or 503.
func (u *Upstream) SetHealthy(ok bool) {
	u.mu.Lock()
	u.healthy = ok
	u.mu.Unlock()
}

// DieAfter cuts the connection after n stream chunks (or, non-streaming, mid-body when n is 0);
// -1 turns it off.
func (u *Upstream) DieAfter(n int) {
	u.mu.Lock()
	u.dieAfter = n
	u.mu.Unlock()
}

// Hold makes POSTs wait before answering until the returned release is called.
func (u *Upstream) Hold() (release func()) {
	g := make(chan struct{})
	u.mu.Lock()
	u.gate = g
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			if u.gate == g {
				u.gate = nil
			}
			u.mu.Unlock()
			close(g)
		})
	}
}

// Started receives one value each time a POST reaches the handler.
func (u *Upstream) Started() <-chan struct{} { return u.started }

// Requests counts POSTs to /v1 received; Tokenizes those to /tokenize and /detokenize; Canceled those whose client went away mid-request; InFlight
// those being answered now.
func (u *Upstream) Requests() int64  { return u.requests.Load() }
func (u *Upstream) Tokenizes() int64 { return u.tokenize.Load() }
func (u *Upstream) Canceled() int64  { return u.canceled.Load() }
func (u *Upstream) InFlight() int64  { return u.inflight.Load() }

// PeakInFlight is the most generation and embedding requests it had in flight at once.
func (u *Upstream) PeakInFlight() int64 { return u.peak.Load() }

func (u *Upstream) enter() {
	n := u.inflight.Add(1)
	for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
	}
}

// LastBody and LastHeader are the last POST's body and headers as received (/tokenize's included).
func (u *Upstream) LastBody() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastBody
}

// LastQuery is the last POST's raw query string.
func (u *Upstream) LastQuery() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastQry
}

func (u *Upstream) LastHeader() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastHdr
}

func (u *Upstream) health(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	ok := u.healthy
	u.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (u *Upstream) models(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID          string `json:"id"`
		Object      string `json:"object"`
		Created     int64  `json:"created"`
		OwnedBy     string `json:"owned_by"`
		Root        string `json:"root"`
		MaxModelLen int    `json:"max_model_len"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range u.Models {
		list.Data = append(list.Data, model{m, "model", 1700000000, "vllm", m, 4096})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// knobs is a snapshot of the failure and stream settings for one request.
type knobs struct {
	chunks, failWith, dieAfter int
	gap, endHold               time.Duration
	reply                      string
	stamp                      bool
}

// piece is the content of stream chunk i of n: "tok<i> ", or the i-th of n nearly equal parts of
// the reply, as a JSON string.
func (k knobs) piece(i int) []byte {
	var s string
	switch {
	case k.stamp:
		s = strconv.FormatInt(time.Now().UnixNano(), 10)
	case k.reply != "":
		r := []rune(k.reply)
		s = string(r[i*len(r)/k.chunks : (i+1)*len(r)/k.chunks])
	default:
		s = fmt.Sprintf("tok%d ", i)
	}
	b, _ := json.Marshal(s)
	return b
}

type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// begin records a POST and applies the injected failure; ok=false means it was answered.
func (u *Upstream) begin(w http.ResponseWriter, r *http.Request) (req request, body []byte, knobs knobs, ok bool) {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		u.requests.Add(1)
	} else {
		u.tokenize.Add(1)
	}
	body, _ = io.ReadAll(r.Body)
	u.mu.Lock()
	u.lastBody, u.lastHdr, u.lastQry = body, r.Header.Clone(), r.URL.RawQuery
	knobs.chunks, knobs.gap, knobs.failWith, knobs.dieAfter, knobs.reply, knobs.endHold, knobs.stamp = u.chunks, u.gap, u.failWith, u.dieAfter, u.reply, u.endHold, u.stamp
	gate, latency := u.gate, u.latency
	for substr, status := range u.failOn {
		if bytes.Contains(body, []byte(substr)) {
			knobs.failWith = status
		}
	}
	u.mu.Unlock()
	select {
	case u.started <- struct{}{}:
	default:
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			u.canceled.Add(1)
			return req, nil, knobs, false
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			u.canceled.Add(1)
			return req, nil, knobs, false
		}
	}
	if knobs.failWith != 0 {
		writeErr(w, knobs.failWith, fmt.Sprintf("injected failure from %s", u.Name))
		return req, nil, knobs, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return req, nil, knobs, false
	}
	if !u.serves(req.Model) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return req, nil, knobs, false
	}
	return req, body, knobs, true
}

func (u *Upstream) serves(m string) bool {
	for _, x := range u.Models {
		if x == m {
			return true
		}
	}
	return false
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"object":"error","message":%q,"type":"BadRequestError","param":null,"code":%d}`, msg, status)
}

func (u *Upstream) generate(w http.ResponseWriter, r *http.Request) {
	u.enter()
	defer u.inflight.Add(-1)
	req, _, k, ok := u.begin(w, r)
	if !ok {
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	id := "cmpl-" + u.Name
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		text := "Hello from " + u.Name
		if k.reply != "" {
			text = k.reply
		}
		textJSON, _ := json.Marshal(text)
		var b []byte
		if chat {
			b = fmt.Appendf(nil, `{"id":"chat%s","object":"chat.completion","created":1700000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%s,"tool_calls":[]},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4},"prompt_logprobs":null}`, id, req.Model, textJSON)
		} else {
			b = fmt.Appendf(nil, `{"id":%q,"object":"text_completion","created":1700000000,"model":%q,"choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4}}`, id, req.Model, textJSON)
		}
		if k.dieAfter >= 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	var t *time.Timer
	wait := func() bool {
		if k.gap <= 0 {
			return r.Context().Err() == nil
		}
		if t == nil {
			t = time.NewTimer(k.gap)
		} else {
			t.Reset(k.gap)
		}
		select {
		case <-t.C:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	var buf []byte
	for i := 0; i < k.chunks; i++ {
		if (i > 0 && !wait()) || r.Context().Err() != nil {
			u.canceled.Add(1)
			return
		}
		if i == k.dieAfter {
			panic(http.ErrAbortHandler) // a crash: no terminating chunk, the client sees EOF mid-stream
		}
		buf = buf[:0]
		if chat {
			buf = fmt.Appendf(buf, `data: {"id":"chat%s","object":"chat.completion.chunk","created":1700000000,"model":%q,"choices":[{"index":0,"delta":{"content":%s},"logprobs":null,"finish_reason":null}]}`+"\n\n", id, req.Model, k.piece(i))
		} else {
			buf = fmt.Appendf(buf, `data: {"id":%q,"object":"text_completion","created":1700000000,"model":%q,"choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":null}]}`+"\n\n", id, req.Model, k.piece(i))
		}
		if _, err := w.Write(buf); err != nil {
			u.canceled.Add(1)
			return
		}
		fl.Flush()
	}
	if k.dieAfter == k.chunks {
		panic(http.ErrAbortHandler)
	}
	if chat {
		fmt.Fprintf(w, `data: {"id":"chat%s","object":"chat.completion.chunk","created":1700000000,"model":%q,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}`+"\n\n", id, req.Model)
	} else {
		fmt.Fprintf(w, `data: {"id":%q,"object":"text_completion","created":1700000000,"model":%q,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}]}`+"\n\n", id, req.Model)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		obj := "text_completion"
		if chat {
			obj = "chat.completion.chunk"
		}
		fmt.Fprintf(w, `data: {"id":%q,"object":%q,"created":1700000000,"model":%q,"choices":[],"usage":{"prompt_tokens":7,"total_tokens":%d,"completion_tokens":%d}}`+"\n\n", id, obj, req.Model, 7+k.chunks, k.chunks)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	fl.Flush()
	if k.endHold > 0 {
		t := time.NewTimer(k.endHold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
	}
}

func (u *Upstream) embeddings(w http.ResponseWriter, r *http.Request) {
	u.enter()
	defer u.inflight.Add(-1)
	req, _, _, ok := u.begin(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"embd-%s","object":"list","created":1700000000,"model":%q,"data":[{"index":0,"object":"embedding","embedding":[0.25,-0.5,1.0]}],"usage":{"prompt_tokens":3,"total_tokens":3,"completion_tokens":0}}`, u.Name, req.Model)
}

// openaiPoolingPaths are vLLM's pooling-model routes the fake answers (pooling).
var openaiPoolingPaths = []string{"/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/score", "/pooling", "/classify"}

// pooling answers vLLM's rerank, score, pooling and classify routes with one fixed result that
// names the path it was asked on, so a test sees which route a request reached.
func (u *Upstream) pooling(w http.ResponseWriter, r *http.Request) {
	u.enter()
	defer u.inflight.Add(-1)
	req, _, _, ok := u.begin(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"pool-%s","object":"list","created":1700000000,"model":%q,"path":%q,"data":[{"index":0,"score":0.5}],"usage":{"prompt_tokens":5,"total_tokens":5}}`, u.Name, req.Model, r.URL.Path)
}

// tokenizeHandler answers vLLM's /tokenize and /detokenize in their shapes, with a tokenizer of
// its own: a prompt's tokens are its bytes (a conversation's, its messages' string contents, one
// after another), and detokenizing turns them back into bytes. Injected failures apply as to /v1.
func (u *Upstream) tokenizeHandler(w http.ResponseWriter, r *http.Request) {
	_, body, _, ok := u.begin(w, r)
	if !ok {
		return
	}
	var req struct {
		Prompt   *string `json:"prompt"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		ReturnTokenStrs bool  `json:"return_token_strs"`
		Tokens          []int `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/detokenize" {
		b := make([]byte, 0, len(req.Tokens))
		for _, t := range req.Tokens {
			if t < 0 || t > 255 {
				writeErr(w, http.StatusBadRequest, fmt.Sprintf("token id %d out of vocabulary", t))
				return
			}
			b = append(b, byte(t))
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"prompt": string(b)})
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Messages != nil:
		for _, m := range req.Messages {
			text += m.Content
		}
	default:
		writeErr(w, http.StatusBadRequest, "give a prompt or messages")
		return
	}
	out := struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int    `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{Count: len(text), MaxModelLen: 4096, Tokens: make([]int, len(text))}
	for i := range len(text) {
		out.Tokens[i] = int(text[i])
		if req.ReturnTokenStrs {
			out.TokenStrs = append(out.TokenStrs, text[i:i+1])
		}
	}
	_ = json.NewEncoder(w).Encode(out)
}
