package embed

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
)

// LLMRequest is one OpenAI request for an embedded LLM, as the gateway forwarded it.
type LLMRequest struct {
	// Path is /v1/chat/completions or /v1/completions.
	Path string
	// Body is the OpenAI request body (the KServe bridge's requests arrive converted to one).
	Body   []byte
	Model  string
	Stream bool
}

// LLMFunc answers one request: it calls emit with each piece of text, in order (once for a
// whole answer). emit returns an error when the client is gone; the function should then stop.
type LLMFunc func(ctx context.Context, req LLMRequest, emit func(text string) error) error

// Embedded LLMs are served by an OpenAI-compatible HTTP server on a loopback port that the
// gateway's OpenAI proxy routes to like any upstream: every surface that reaches an upstream
// LLM (OpenAI HTTP and Connect, the KServe bridge, SSE streaming, the proxy's metrics) reaches
// them the same way, with no second code path. Requests to it carry a random bearer token so
// that other local processes cannot call the functions past the gateway.

// maxLLMBody bounds one request body, as the proxy's own default does.
const maxLLMBody = 64 << 20

type llmServer struct {
	srv   *http.Server
	url   string
	token string
	ids   atomic.Uint64

	mu  sync.RWMutex
	fns map[string]LLMFunc
}

func newLLMServer() (*llmServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("embedded LLM server: %w", err)
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	s := &llmServer{url: "http://" + ln.Addr().String(), token: hex.EncodeToString(key[:]), fns: map[string]LLMFunc{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/chat/completions", s.serve)
	mux.HandleFunc("POST /v1/completions", s.serve)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *llmServer) close() { _ = s.srv.Close() }

func (s *llmServer) models(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	var list []map[string]string
	for name := range s.fns {
		list = append(list, map[string]string{"id": name, "object": "model", "owned_by": "python"})
	}
	s.mu.RUnlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": list})
}

// RegisterLLM serves fn as the LLM name on the OpenAI routes and, through the KServe bridge, as
// a KServe model with text_input and text_output. It returns once the model is routable.
func (g *Gateway) RegisterLLM(name string, fn LLMFunc) error {
	if err := validName(name); err != nil {
		return err
	}
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return errors.New("gateway is stopped")
	}
	if g.llms == nil {
		s, err := newLLMServer()
		if err != nil {
			g.mu.Unlock()
			return err
		}
		g.llms = s
	}
	s := g.llms
	g.mu.Unlock()
	if g.app.Models.Lookup(name) != nil || slices.ContainsFunc(g.app.OpenAI.Models(), func(m openaipool.ModelInfo) bool { return m.Name == name }) {
		return fmt.Errorf("model '%s' is already registered", name)
	}
	s.mu.Lock()
	if _, dup := s.fns[name]; dup {
		s.mu.Unlock()
		return fmt.Errorf("model '%s' is already registered", name)
	}
	s.fns[name] = fn
	s.mu.Unlock()
	err := g.app.OpenAI.AddEndpoint(upstream.Endpoint{Name: "python:" + name, URL: s.url, Type: upstream.TypeVLLM,
		Models: []string{name}, SkipDiscovery: true, CheckInterval: 5 * time.Second,
		Headers: map[string]string{"Authorization": "Bearer " + s.token}})
	if err != nil {
		s.mu.Lock()
		delete(s.fns, name)
		s.mu.Unlock()
		return fmt.Errorf("model '%s': %w", name, err)
	}
	// The endpoint's first health check runs at once; wait for it and the bridge, so that the
	// model answers as soon as registration returns.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if g.app.Models.Lookup(name) != nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("model '%s' was registered but did not become routable within 5 s", name)
}

// serve answers one OpenAI request with the model's function, whole or as SSE.
func (s *llmServer) serve(w http.ResponseWriter, r *http.Request) {
	got := r.Header.Get("Authorization")
	if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+s.token)) != 1 {
		openAIError(w, http.StatusUnauthorized, "invalid_request_error", "this server only answers the gateway")
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var head struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "request body is not JSON: "+err.Error())
		return
	}
	s.mu.RLock()
	fn := s.fns[head.Model]
	s.mu.RUnlock()
	if fn == nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("The model `%s` does not exist.", head.Model))
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	req := LLMRequest{Path: r.URL.Path, Body: body, Model: head.Model, Stream: head.Stream}
	id := "cmpl-py" + strconv.FormatUint(s.ids.Add(1), 10)
	created := time.Now().Unix()
	if !head.Stream {
		var text []byte
		err := fn(r.Context(), req, func(t string) error {
			if len(text)+len(t) > maxLLMBody {
				return errors.New("answer too long")
			}
			text = append(text, t...)
			return r.Context().Err()
		})
		if err != nil {
			openAIError(w, http.StatusInternalServerError, "server_error", err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(whole(chat, id, head.Model, created, string(text)))
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	write := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if chat {
		if err := write(chunk(chat, id, head.Model, created, map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
			return
		}
	}
	err = fn(r.Context(), req, func(t string) error {
		if err := r.Context().Err(); err != nil {
			return err
		}
		if chat {
			return write(chunk(chat, id, head.Model, created, map[string]any{"content": t}, nil))
		}
		return write(chunk(chat, id, head.Model, created, t, nil))
	})
	if err != nil {
		if r.Context().Err() == nil {
			_ = write(map[string]any{"error": map[string]any{"message": err.Error(), "type": "server_error"}})
		}
		return
	}
	stop := "stop"
	if chat {
		_ = write(chunk(chat, id, head.Model, created, map[string]any{}, &stop))
	} else {
		_ = write(chunk(chat, id, head.Model, created, "", &stop))
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	_ = rc.Flush()
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxLLMBody))
}

func whole(chat bool, id, model string, created int64, text string) map[string]any {
	usage := map[string]int{"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
	if chat {
		return map[string]any{"id": id, "object": "chat.completion", "created": created, "model": model, "usage": usage,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": text}}}}
	}
	return map[string]any{"id": id, "object": "text_completion", "created": created, "model": model, "usage": usage,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "text": text}}}
}

// chunk is one streamed piece: delta is a chat delta object, or a completion's text.
func chunk(chat bool, id, model string, created int64, delta any, finish *string) map[string]any {
	choice := map[string]any{"index": 0, "finish_reason": finish}
	object := "text_completion"
	if chat {
		choice["delta"] = delta
		object = "chat.completion.chunk"
	} else {
		choice["text"] = delta
	}
	return map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{choice}}
}

func openAIError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ}})
}
