package respcache_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/require"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// upstreamFake is an OpenAI-compatible model server on a loopback port whose answers a test
// chooses: by default "Answer to: <the last user message>" (or the prompt), finishing with stop,
// streamed a word per chunk. It counts the generation requests it received.
type upstreamFake struct {
	URL   string
	calls atomic.Int64

	mu       sync.Mutex
	finish   string        // finish_reason; default stop
	tools    bool          // answer with a tool call
	status   int           // answer this error status instead
	dieAfter int           // cut a stream after this many chunks (0: never)
	latency  time.Duration // before answering
	reply    string        // instead of the default text
	hold     chan struct{} // when set, answers wait until it is closed
}

func newUpstream(t testing.TB) *upstreamFake {
	u := &upstreamFake{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"t"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", u.generate)
	mux.HandleFunc("POST /v1/completions", u.generate)
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, _ *http.Request) {
		u.calls.Add(1)
		fmt.Fprint(w, `{"object":"list","data":[{"index":0,"object":"embedding","embedding":[1]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

func (u *upstreamFake) set(f func(u *upstreamFake)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

type fakeRequest struct {
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Prompt   any `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
}

var answerSeq atomic.Int64

func (u *upstreamFake) generate(w http.ResponseWriter, r *http.Request) {
	u.calls.Add(1)
	u.mu.Lock()
	finish, tools, status, dieAfter, latency, reply, hold := u.finish, u.tools, u.status, u.dieAfter, u.latency, u.reply, u.hold
	u.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if latency > 0 {
		time.Sleep(latency)
	}
	var req fakeRequest
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"message":"injected","type":"server_error","code":null}}`)
		return
	}
	if finish == "" {
		finish = "stop"
	}
	chat := r.URL.Path == "/v1/chat/completions"
	text := reply
	if text == "" {
		last := fmt.Sprint(req.Prompt)
		for _, m := range req.Messages {
			if m.Role == "user" {
				last = fmt.Sprint(m.Content)
			}
		}
		text = "Answer to: " + last
	}
	id := fmt.Sprintf("up-%d", answerSeq.Add(1))
	var toolCalls = `[]`
	if tools {
		toolCalls = `[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]`
	}
	obj, chunkObj := "text_completion", "text_completion"
	if chat {
		obj, chunkObj = "chat.completion", "chat.completion.chunk"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		tj, _ := json.Marshal(text)
		if chat {
			fmt.Fprintf(w, `{"id":%q,"object":%q,"created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s,"tool_calls":%s},"logprobs":null,"finish_reason":%q}],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}`, id, obj, tj, toolCalls, finish)
		} else {
			fmt.Fprintf(w, `{"id":%q,"object":%q,"created":1700000000,"model":"m","choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":%q}],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}`, id, obj, tj, finish)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	send := func(choice string) {
		fmt.Fprintf(w, "data: {\"id\":%q,\"object\":%q,\"created\":1700000000,\"model\":\"m\",\"choices\":[%s]}\n\n", id, chunkObj, choice)
		fl.Flush()
	}
	if chat {
		send(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`)
	}
	for i, piece := range strings.SplitAfter(text, " ") {
		if dieAfter > 0 && i == dieAfter {
			panic(http.ErrAbortHandler) // the connection is cut
		}
		pj, _ := json.Marshal(piece)
		if chat {
			send(fmt.Sprintf(`{"index":0,"delta":{"content":%s},"finish_reason":null}`, pj))
		} else {
			send(fmt.Sprintf(`{"index":0,"text":%s,"finish_reason":null}`, pj))
		}
	}
	if tools && chat {
		send(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":null}`)
	}
	if chat {
		send(fmt.Sprintf(`{"index":0,"delta":{},"finish_reason":%q}`, finish))
	} else {
		send(fmt.Sprintf(`{"index":0,"text":"","finish_reason":%q}`, finish))
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":%q,\"object\":%q,\"created\":1700000000,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11}}\n\n", id, chunkObj)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// ownerKey carries the test's API key name, which the Owner option reads.
type ownerKey struct{}

// withOwner is an interceptor standing in for the guard: the X-Test-Key header names the
// caller's API key.
func withOwner(next pipeline.Handler) pipeline.Handler {
	return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		if k := req.Header.Get("X-Test-Key"); k != "" {
			ctx = context.WithValue(ctx, ownerKey{}, k)
		}
		return next(ctx, req)
	}
}

func ownerOf(ctx context.Context) string { s, _ := ctx.Value(ownerKey{}).(string); return s }

// gw is a gateway on a loopback port: the OpenAI proxy with the cache stage, before up.
type gw struct {
	URL   string
	cache *respcache.Cache
	up    *upstreamFake
}

// startGateway serves model m from up through a cache made with opts (Model, Owner and Logger
// filled in when empty).
func startGateway(t testing.TB, up *upstreamFake, opts respcache.Options) *gw {
	t.Helper()
	opts.Model = "m"
	if opts.Owner == nil {
		opts.Owner = ownerOf
	}
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	c, err := respcache.New(opts)
	require.NoError(t, err)
	p, err := openai.New(openai.Options{
		Endpoints: []upstream.Endpoint{{Name: "up", URL: up.URL, Type: upstream.TypeVLLM,
			CheckInterval: time.Hour, CheckTimeout: time.Second}},
		Logger: quiet(),
		Stages: pipeline.ForAll(withOwner, c.Interceptor()),
	})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)
	mux := http.NewServeMux()
	p.Mount(mux, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Wait)
	return &gw{URL: srv.URL, cache: c, up: up}
}

// answer is a response as the client got it.
type answer struct {
	status int
	header http.Header
	body   string
	err    error // reading the body
}

func (a answer) cache() string { return a.header.Get(respcache.Header) }

// post sends body to path with headers given as name, value pairs.
func (g *gw) post(t testing.TB, path, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body) // an error: a response cut short, which the caller checks
	g.cache.Wait()                 // what the answer left to store is stored
	return answer{status: res.StatusCode, header: res.Header, body: string(b), err: err}
}

func (g *gw) chat(t testing.TB, body string, hdr ...string) answer {
	t.Helper()
	return g.post(t, "/v1/chat/completions", body, hdr...)
}

// chatReq is a chat request body: temperature 0 and one user message, plus extra members.
func chatReq(question string, extra ...string) string {
	q, _ := json.Marshal(question)
	s := `{"model":"m","temperature":0,"messages":[{"role":"user","content":` + string(q) + `}]`
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// completion is the parts of a chat completion or completion the tests compare.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Role      string            `json:"role"`
			Content   string            `json:"content"`
			ToolCalls []json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func decode(t testing.TB, body string) completion {
	t.Helper()
	var c completion
	require.NoError(t, json.Unmarshal([]byte(body), &c), body)
	return c
}

// content is the answer's text: a chat message's content or a completion's text.
func (c completion) content() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].Message.Content + c.Choices[0].Text
}

// streamed reads an SSE body: the chunks' concatenated text, the chunks, and whether it ended
// with [DONE].
func streamed(t testing.TB, body string) (text string, chunks []completionChunk, done bool) {
	t.Helper()
	ev := pipeline.NewEvents(strings.NewReader(body))
	for {
		data, err := ev.Next()
		if err == io.EOF {
			return text, chunks, ev.Done()
		}
		require.NoError(t, err)
		var c completionChunk
		require.NoError(t, json.Unmarshal(data, &c), string(data))
		for _, ch := range c.Choices {
			text += ch.Delta.Content + ch.Text
		}
		chunks = append(chunks, c)
	}
}

type completionChunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

// bagEmbedder is a deterministic embedder for tests: each lower-cased word (punctuation
// dropped) adds 1 to one of 64 dimensions picked by its hash, so texts with the same words are
// identical and texts sharing most words are close. It stands for an embeddings model (a
// respcache.ModelEmbedder, named model unless set): its similarity alone decides a hit.
type bagEmbedder struct {
	calls atomic.Int64
	fail  atomic.Bool
	model *string // the name EmbeddingsModel gives; nil: "bag"
}

func (e *bagEmbedder) EmbeddingsModel() string {
	if e.model != nil {
		return *e.model
	}
	return "bag"
}

func (e *bagEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.calls.Add(1)
	if e.fail.Load() {
		return nil, fmt.Errorf("embedder down")
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, 64)
		for _, w := range strings.Fields(strings.ToLower(t)) {
			w = strings.Trim(w, ".,!?;:")
			h := fnv.New32a()
			h.Write([]byte(w))
			v[h.Sum32()%64]++
		}
		out[i] = v
	}
	return out, nil
}

// startPlainGateway serves model m from up with no stage at all: the gateway's own forwarding.
func startPlainGateway(t testing.TB, up *upstreamFake) string {
	t.Helper()
	p, err := openai.New(openai.Options{
		Endpoints: []upstream.Endpoint{{Name: "up", URL: up.URL, Type: upstream.TypeVLLM,
			CheckInterval: time.Hour, CheckTimeout: time.Second}},
		Logger: quiet(),
	})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)
	mux := http.NewServeMux()
	p.Mount(mux, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}
