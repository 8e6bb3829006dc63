// Package tokeninputtest is a fake inference engine that takes token ids and has no tokenizer,
// as a Dynamo token-input worker or an engine started with --skip-tokenizer-init: its
// /v1/completions refuses a text prompt, records the ids it was sent, and answers with canned
// pieces of text (or of token ids, with no text, or its prompt's own ids: SetEcho), whole or
// streamed, one piece per chunk. It does not know stop strings: it generates on past them, as
// such an engine does. It also serves /v1/models and /health, so a gateway's discovery and health
// checks see a model. examples/tokenengine serves it as a command.
package tokeninputtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Engine is a running fake. Its knobs are safe to change while it serves.
type Engine struct {
	URL string // http://127.0.0.1:port, without /v1

	model    string
	mux      *http.ServeMux
	mu       sync.Mutex
	pieces   []string
	ids      [][]int
	echo     bool
	usage    bool
	prompts  [][]int
	requests atomic.Int64
	sent     atomic.Int64 // stream chunks written
}

// New is a fake for model, not yet serving (Handler serves it). It answers "Hello" " world" "."
// until SetReply changes that, and sends no usage until SetUsage.
func New(model string) *Engine {
	e := &Engine{model: model, pieces: []string{"Hello", " world", "."}, mux: http.NewServeMux()}
	e.mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	e.mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"fake"}]}`, model)
	})
	e.mux.HandleFunc("POST /v1/completions", e.complete)
	return e
}

// Handler serves the engine's routes.
func (e *Engine) Handler() http.Handler { return e.mux }

// Start serves New(model) on 127.0.0.1 until tb ends.
func Start(tb testing.TB, model string) *Engine {
	tb.Helper()
	e := New(model)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	e.URL = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: e.mux}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return e
}

// SetReply sets the text pieces of an answer, one per token and stream chunk.
func (e *Engine) SetReply(pieces ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pieces, e.ids = pieces, nil
}

// SetReplyIDs makes answers carry token ids (one slice per chunk) and no text.
func (e *Engine) SetReplyIDs(ids ...[]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids, e.pieces = ids, nil
}

// SetEcho makes answers the prompt's own ids, one per chunk, with no text: what the gateway's
// detokenizer makes of them is the prompt the model saw.
func (e *Engine) SetEcho(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.echo = on
}

// SetUsage makes answers carry a usage object (a stream's when asked with include_usage).
func (e *Engine) SetUsage(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.usage = on
}

// Prompts are the prompts received, in order.
func (e *Engine) Prompts() [][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([][]int(nil), e.prompts...)
}

// Requests counts the completions received.
func (e *Engine) Requests() int64 { return e.requests.Load() }

// ChunksSent counts the stream chunks written.
func (e *Engine) ChunksSent() int64 { return e.sent.Load() }

type request struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	N             int             `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages json.RawMessage `json:"messages"`
}

func (e *Engine) complete(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, "invalid JSON: "+err.Error())
		return
	}
	var ids []int
	if err := json.Unmarshal(req.Prompt, &ids); err != nil || req.Messages != nil {
		fail(w, "this engine has no tokenizer: the prompt must be a list of token ids")
		return
	}
	e.mu.Lock()
	e.prompts = append(e.prompts, ids)
	pieces, pieceIDs, withUsage := e.pieces, e.ids, e.usage
	if e.echo {
		pieces, pieceIDs = nil, make([][]int, len(ids))
		for i, id := range ids {
			pieceIDs[i] = []int{id}
		}
	}
	e.mu.Unlock()
	steps := max(len(pieces), len(pieceIDs))
	reason := "stop"
	if req.MaxTokens != nil && *req.MaxTokens < steps {
		steps, reason = *req.MaxTokens, "length"
	}
	n := max(req.N, 1)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, len(ids), steps*n, len(ids)+steps*n)
	step := func(i int) (string, string) {
		if pieceIDs != nil {
			b, _ := json.Marshal(pieceIDs[i])
			return "", `,"token_ids":` + string(b)
		}
		return pieces[i], ""
	}
	if !req.Stream {
		var choices []string
		for c := range n {
			var text strings.Builder
			var all []int
			for i := range steps {
				t, _ := step(i)
				text.WriteString(t)
				if pieceIDs != nil {
					all = append(all, pieceIDs[i]...)
				}
			}
			extra := ""
			if pieceIDs != nil {
				b, _ := json.Marshal(all)
				extra = `,"token_ids":` + string(b)
			}
			t, _ := json.Marshal(text.String())
			choices = append(choices, fmt.Sprintf(`{"index":%d,"text":%s,"logprobs":null,"finish_reason":%q,"stop_reason":null%s}`, c, t, reason, extra))
		}
		w.Header().Set("Content-Type", "application/json")
		u := ""
		if withUsage {
			u = `,"usage":` + usage
		}
		fmt.Fprintf(w, `{"id":"cmpl-fake1","object":"text_completion","created":1700000000,"model":%q,"choices":[%s]%s}`,
			req.Model, strings.Join(choices, ","), u)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(data string) bool {
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		e.sent.Add(1)
		return r.Context().Err() == nil
	}
	for i := range steps {
		for c := range n {
			t, extra := step(i)
			tj, _ := json.Marshal(t)
			fin := "null"
			if i == steps-1 {
				fin = `"` + reason + `"`
			}
			if !send(fmt.Sprintf(`{"id":"cmpl-fake1","object":"text_completion","created":1700000000,"model":%q,"choices":[{"index":%d,"text":%s,"logprobs":null,"finish_reason":%s%s}]}`,
				req.Model, c, tj, fin, extra)) {
				return
			}
		}
	}
	if withUsage && req.StreamOptions.IncludeUsage {
		send(fmt.Sprintf(`{"id":"cmpl-fake1","object":"text_completion","created":1700000000,"model":%q,"choices":[],"usage":%s}`, req.Model, usage))
	}
	send("[DONE]")
}

func fail(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	b, _ := json.Marshal(msg)
	fmt.Fprintf(w, `{"error":{"message":%s,"type":"BadRequestError","param":"prompt","code":400}}`, b)
}
