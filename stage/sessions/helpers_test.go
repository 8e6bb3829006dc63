package sessions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/stretchr/testify/require"
)

// chatMsg is a message as the tests read it.
type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// upstream is a fake model server speaking chat completions (JSON and SSE) on a real socket. It
// answers "re: " and the last message's content, and records what it received.
type upstream struct {
	name string
	srv  *httptest.Server

	mu      sync.Mutex
	seen    [][]chatMsg // each request's messages
	bodies  [][]byte
	headers []http.Header

	failWith atomic.Int32 // an HTTP status to answer with instead
	cut      atomic.Bool  // streams die after their first chunk
	hold     chan struct{}
	arrived  chan struct{}
}

func startUpstream(t *testing.T, name string) *upstream {
	u := &upstream{name: name}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

// holdNext makes requests wait until the returned release is called; arrived receives one
// value per request that reached the upstream meanwhile.
func (u *upstream) holdNext() (arrived <-chan struct{}, release func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hold, u.arrived = make(chan struct{}), make(chan struct{}, 64)
	h := u.hold
	var once sync.Once
	return u.arrived, func() { once.Do(func() { close(h) }) }
}

func (u *upstream) requests() [][]chatMsg {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]chatMsg(nil), u.seen...)
}

func (u *upstream) last() ([]chatMsg, []byte, http.Header) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil, nil, nil
	}
	n := len(u.seen) - 1
	return u.seen[n], u.bodies[n], u.headers[n]
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model    string    `json:"model"`
		Stream   bool      `json:"stream"`
		Messages []chatMsg `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.seen = append(u.seen, req.Messages)
	u.bodies = append(u.bodies, body)
	u.headers = append(u.headers, r.Header.Clone())
	hold, arrived := u.hold, u.arrived
	u.mu.Unlock()
	if hold != nil {
		arrived <- struct{}{}
		<-hold
	}
	if st := u.failWith.Load(); st != 0 {
		http.Error(w, `{"error":{"message":"injected","type":"server_error"}}`, int(st))
		return
	}
	answer := "re: "
	if n := len(req.Messages); n > 0 {
		answer += req.Messages[n-1].Content
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"reasoning_content":"hmm","refusal":null,"tool_calls":[]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`,
			req.Model, answer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	chunk := func(delta, finish string) {
		fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", req.Model, delta, finish)
		fl.Flush()
	}
	half := len(answer) / 2
	chunk(`{"role":"assistant","content":""}`, "null")
	chunk(fmt.Sprintf(`{"content":%q}`, answer[:half]), "null")
	if u.cut.Load() {
		panic(http.ErrAbortHandler) // the connection dies mid-stream
	}
	fmt.Fprint(w, ": keep-alive\n\n")
	chunk(fmt.Sprintf(`{"content":%q}`, answer[half:]), "null")
	chunk(`{}`, `"stop"`)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// preferKey carries the endpoint a turn prefers, as the runtime's Prefer does through the
// upstream picker.
type preferKey struct{}

func prefer(ctx context.Context, endpoint string) context.Context {
	return context.WithValue(ctx, preferKey{}, endpoint)
}

// terminal is a small upstream exchange: the preferred endpoint while it is up, else the next
// in turn.
type terminal struct {
	ups  []*upstream
	down sync.Map // name -> true: not usable
	rr   atomic.Uint32
}

func (tm *terminal) handle(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	var u *upstream
	if name, ok := ctx.Value(preferKey{}).(string); ok {
		for _, c := range tm.ups {
			if _, down := tm.down.Load(c.name); c.name == name && !down {
				u = c
			}
		}
	}
	for u == nil {
		c := tm.ups[int(tm.rr.Add(1))%len(tm.ups)]
		if _, down := tm.down.Load(c.name); !down {
			u = c
		}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.srv.URL+req.Path, bytes.NewReader(req.Body()))
	if err != nil {
		return nil, err
	}
	for k, vv := range req.Header {
		if k != "Content-Length" {
			hreq.Header[k] = vv
		}
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_unreachable", err.Error())
	}
	return &pipeline.Response{StatusCode: resp.StatusCode, Header: resp.Header, Endpoint: u.name, Model: req.Model(),
		Stream: resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"),
		Body:   &httpBody{rc: resp.Body}}, nil
}

type httpBody struct {
	rc  io.ReadCloser
	err error
}

func (b *httpBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *httpBody) Finish(error) pipeline.Usage { _ = b.rc.Close(); return pipeline.Usage{Status: 200} }
func (b *httpBody) Err() error                  { return b.err }

type ownerKey struct{}

func owner(ctx context.Context) string { s, _ := ctx.Value(ownerKey{}).(string); return s }

// withOwner is the API key check: the bearer token is the caller's identity.
func withOwner(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ownerKey{}, key)))
	})
}

// gateway is a test gateway: the sessions API and /v1/ POSTs through each model's chain.
type gateway struct {
	t       *testing.T
	srv     *httptest.Server
	m       *sessions.Manager
	term    *terminal
	chains  map[string]pipeline.Handler
	metrics *sessions.Metrics
}

type gwConfig struct {
	store   sessions.Store
	models  map[string]sessions.ModelOptions
	prefer  bool
	ups     []*upstream
	options func(*sessions.Options)
}

func startGateway(t *testing.T, c gwConfig) *gateway {
	t.Helper()
	if c.store == nil {
		c.store = sessions.NewMemory(sessions.MemoryOptions{})
	}
	if c.models == nil {
		c.models = map[string]sessions.ModelOptions{"m": {}}
	}
	if c.ups == nil {
		c.ups = []*upstream{startUpstream(t, "u1")}
	}
	g := &gateway{t: t, term: &terminal{ups: c.ups}, chains: map[string]pipeline.Handler{}, metrics: sessions.NewMetrics()}
	opts := sessions.Options{Store: c.store, Models: c.models, Owner: owner, Metrics: g.metrics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if c.prefer {
		opts.Prefer = prefer
	}
	if c.options != nil {
		c.options(&opts)
	}
	g.m = sessions.New(opts)
	for _, model := range []string{"m", "m2", "plain"} {
		g.chains[model] = pipeline.Chain(g.term.handle, g.m.Interceptor(model))
	}
	mux := http.NewServeMux()
	api := withOwner(g.m.Handler())
	mux.Handle("/v1/sessions", api)
	mux.Handle("/v1/sessions/", api)
	mux.Handle("/v1/", withOwner(http.HandlerFunc(g.proxy)))
	g.srv = httptest.NewServer(mux)
	t.Cleanup(g.srv.Close)
	return g
}

// proxy is the OpenAI surface, as surface/openai's: a Request through the model's chain.
func (g *gateway) proxy(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, err := pipeline.NewRequest(r.URL.Path, body)
	if err != nil {
		err.(*pipeline.Error).Write(w)
		return
	}
	req.Header = r.Header
	h, ok := g.chains[req.Model()]
	if !ok {
		pipeline.ModelNotFound(req.Model()).Write(w)
		return
	}
	res, err := h(r.Context(), req)
	if err != nil {
		var e *pipeline.Error
		if errors.As(err, &e) {
			e.Write(w)
		} else {
			pipeline.ServerError(500, "", err.Error()).Write(w)
		}
		return
	}
	for k, vv := range res.GatewayHeader {
		w.Header()[k] = vv
	}
	for k, vv := range res.Header {
		if k != "Content-Length" {
			w.Header()[k] = vv
		}
	}
	w.WriteHeader(res.StatusCode)
	buf := make([]byte, 512)
	for {
		n, rerr := res.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				res.Body.Finish(werr)
				return
			}
			w.(http.Flusher).Flush()
		}
		if rerr != nil {
			break
		}
	}
	res.Body.Finish(nil)
}

// do sends one request and returns the status, headers and body of its answer.
func (g *gateway) do(method, path, key string, body any, header ...string) (int, http.Header, []byte) {
	g.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(g.t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, g.srv.URL+path, rd)
	require.NoError(g.t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(g.t, err)
	return resp.StatusCode, resp.Header, b
}

// create makes a session of model for key.
func (g *gateway) create(key, model string) string {
	g.t.Helper()
	st, _, b := g.do(http.MethodPost, "/v1/sessions", key, map[string]any{"model": model})
	require.Equal(g.t, http.StatusCreated, st, string(b))
	var s struct{ ID, Object, Model string }
	require.NoError(g.t, json.Unmarshal(b, &s))
	require.Equal(g.t, "chat.session", s.Object)
	require.Equal(g.t, model, s.Model)
	return s.ID
}

// turn sends one user message as a turn of session id (by header) and returns the status, the
// answer's text (for a 200) or body, and its headers.
func (g *gateway) turn(key, id string, stream bool, msgs ...chatMsg) (int, string, http.Header) {
	g.t.Helper()
	st, h, b := g.do(http.MethodPost, "/v1/chat/completions", key,
		map[string]any{"model": "m", "stream": stream, "messages": msgs}, sessions.HeaderSessionID, id)
	if st != http.StatusOK {
		return st, string(b), h
	}
	return st, answerText(g.t, b, stream), h
}

func user(s string) chatMsg { return chatMsg{"user", s} }

// answerText reads an answer's content, whole or streamed.
func answerText(t *testing.T, b []byte, stream bool) string {
	t.Helper()
	if !stream {
		var r struct {
			Choices []struct{ Message chatMsg }
		}
		require.NoError(t, json.Unmarshal(b, &r), string(b))
		require.NotEmpty(t, r.Choices, string(b))
		return r.Choices[0].Message.Content
	}
	ev := pipeline.NewEvents(bytes.NewReader(b))
	var text string
	for {
		data, err := ev.Next()
		if err != nil {
			break
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal(data, &c))
		for _, ch := range c.Choices {
			text += ch.Delta.Content
		}
	}
	return text
}

// stored is session id's messages, as GET shows them.
func (g *gateway) stored(key, id string) []chatMsg {
	g.t.Helper()
	st, _, b := g.do(http.MethodGet, "/v1/sessions/"+id, key, nil)
	require.Equal(g.t, http.StatusOK, st, string(b))
	var s struct{ Messages []chatMsg }
	require.NoError(g.t, json.Unmarshal(b, &s))
	return s.Messages
}

func msgs(ms ...string) []chatMsg {
	var out []chatMsg
	for _, m := range ms {
		role, content, _ := strings.Cut(m, ":")
		out = append(out, chatMsg{role, content})
	}
	return out
}
