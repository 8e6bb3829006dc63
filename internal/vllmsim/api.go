package vllmsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"
)

// maxBody bounds a request body: prompts of a few hundred thousand tokens as JSON ids.
const maxBody = 32 << 20

// request is what the simulator reads of a completion or chat request.
type request struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []message       `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MinTokens           int             `json:"min_tokens"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// job is a parsed request and how it will be served.
type job struct {
	chat         bool
	tokens       []int64
	maxTokens    int
	stream       bool
	includeUsage bool
	id           string
	pull         *transfer // KV pulled from a prefill server, for a decode server
	foreign      bool      // carries what no correct gateway forwards (Stats.ForeignParams)
}

// apiError is an answer in vLLM's error shape.
type apiError struct {
	status int
	msg    string
	param  string
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func (e *apiError) write(w http.ResponseWriter) {
	typ := "BadRequestError"
	if e.status == http.StatusNotFound {
		typ = "NotFoundError"
	}
	var param any
	if e.param != "" {
		param = e.param
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"message": e.msg, "type": typ, "param": param, "code": e.status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the simulator's own values always encode
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// complete serves /v1/completions (chat false) and /v1/chat/completions.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	s.mu.Lock()
	s.stats.Requests++
	s.lastBody, s.lastHeader = body, r.Header.Clone()
	s.mu.Unlock()
	if err != nil {
		badRequest("reading the request body: %v", err).write(w)
		return
	}
	j := &job{chat: chat, foreign: slices.ContainsFunc(routingHeaders, func(k string) bool { return r.Header.Get(k) != "" })}
	apiErr := s.parse(j, body, r.Header.Get("X-Request-Id"))
	if j.foreign {
		s.count(func(st *Stats) { st.ForeignParams++ })
	}
	if apiErr != nil {
		apiErr.write(w)
		return
	}
	if err := s.sched.acquire(r.Context()); err != nil {
		return // the client went away while waiting
	}
	defer s.sched.release()
	s.run(r.Context(), w, j)
}

// routingHeaders are the headers disaggregating proxies (llm-d's sidecar, vLLM's router) route
// by: they mean nothing to an engine, so one arriving here was forwarded from a client.
var routingHeaders = []string{"X-Prefiller-Host-Port", "X-Prefiller-Url", "X-Encoder-Hosts-Ports", "X-Data-Parallel-Host-Port"}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// parse reads a request into j, checks what vLLM would refuse and what the server's role
// requires, and for a decode server pulls the KV its params name.
func (s *Server) parse(j *job, body []byte, requestID string) *apiError {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		return badRequest("invalid request body: %v", err)
	}
	p, err := parseParams(req.KVTransferParams)
	if err != nil {
		return err
	}
	// An engine without a KV connector ignores the params (vLLM logs "Got kv_transfer_params,
	// but no KVConnector found"); a gateway that does not disaggregate must not have sent them.
	if p != nil && (s.cfg.Role == "" || s.namesUnknownSource(p)) {
		j.foreign = true
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("The model `%s` does not exist.", req.Model), param: "model"}
	}
	j.stream, j.id = req.Stream != nil && *req.Stream, s.newID(j.chat, requestID)
	if j.chat {
		j.tokens, err = chatTokens(req.Messages)
	} else {
		j.tokens, err = promptTokens(req.Prompt)
	}
	if err != nil {
		return err
	}
	j.maxTokens = 16
	limit := req.MaxTokens
	if j.chat && req.MaxCompletionTokens != nil {
		limit = req.MaxCompletionTokens // vLLM prefers it, max_tokens being deprecated for chat
	}
	switch {
	case limit != nil && *limit < 1:
		return badRequest("max_tokens must be at least 1, got %d.", *limit)
	case limit != nil:
		j.maxTokens = *limit
	}
	switch {
	case req.MinTokens < 0 || req.MinTokens > j.maxTokens:
		return badRequest("min_tokens must be greater than or equal to 0 and less than or equal to max_tokens=%d, got %d.", j.maxTokens, req.MinTokens)
	case req.StreamOptions != nil && !j.stream:
		return badRequest("Stream options can only be defined when `stream=True`.")
	case j.maxTokens > s.cfg.MaxModelLen-len(j.tokens): // not a sum, which a huge max_tokens overflows
		return &apiError{status: http.StatusBadRequest, param: "input_tokens", msg: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d output tokens and your prompt contains at least %d input tokens, for a total of at least %d tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
			s.cfg.MaxModelLen, j.maxTokens, len(j.tokens), len(j.tokens)+min(j.maxTokens, math.MaxInt-len(j.tokens)))}
	}
	j.includeUsage = j.stream && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	return s.disaggregation(j, p)
}

func (s *Server) newID(chat bool, requestID string) string {
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	if requestID == "" {
		requestID = s.cfg.EngineID
	}
	// A suffix keeps ids unique even when callers reuse theirs, as vLLM >= 0.14 appends one.
	return fmt.Sprintf("%s%s-%x", prefix, requestID, s.seq.Add(1))
}

// promptTokens are a completion prompt's tokens: its ids, or pseudo-tokens of its text.
func promptTokens(raw json.RawMessage) ([]int64, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		return nil, &apiError{status: http.StatusBadRequest, msg: "prompt is required", param: "prompt"}
	case raw[0] == '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, badRequest("invalid prompt: %v", err)
		}
		if text == "" {
			return nil, &apiError{status: http.StatusBadRequest, msg: "The prompt cannot be empty.", param: "prompt"}
		}
		return pseudoTokens([]byte(text)), nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, &apiError{status: http.StatusBadRequest, param: "prompt",
			msg: "prompt must be a string or a list of token ids (this simulator serves no batched prompts)"}
	}
	if len(ids) == 0 {
		return nil, &apiError{status: http.StatusBadRequest, msg: "The prompt cannot be empty.", param: "prompt"}
	}
	if slices.ContainsFunc(ids, func(id int64) bool { return id < 0 }) {
		return nil, &apiError{status: http.StatusBadRequest, msg: "Token ids must be non-negative.", param: "prompt"}
	}
	return ids, nil
}

// chatTokens are pseudo-tokens of a chat rendered "<role>: <content>\n" per message, the text
// parts only: deterministic, so chats sharing leading messages share a token prefix.
func chatTokens(messages []message) ([]int64, *apiError) {
	if len(messages) == 0 {
		return nil, &apiError{status: http.StatusBadRequest, msg: "messages must not be empty", param: "messages"}
	}
	var b bytes.Buffer
	for _, m := range messages {
		b.WriteString(m.Role)
		b.WriteString(": ")
		content := bytes.TrimSpace(m.Content)
		switch {
		case len(content) == 0 || bytes.Equal(content, []byte("null")):
		case content[0] == '"':
			var text string
			if err := json.Unmarshal(content, &text); err != nil {
				return nil, badRequest("invalid message content: %v", err)
			}
			b.WriteString(text)
		default:
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(content, &parts); err != nil {
				return nil, badRequest("message content must be a string or a list of parts: %v", err)
			}
			for _, p := range parts {
				if p.Type == "text" {
					b.WriteString(p.Text)
				}
			}
		}
		b.WriteByte('\n')
	}
	return pseudoTokens(b.Bytes()), nil
}

// run serves a job that holds a slot: prefill (or pull), then generate.
func (s *Server) run(ctx context.Context, w http.ResponseWriter, j *job) {
	start := time.Now()
	bs, n := s.cfg.BlockSize, len(j.tokens)
	hashes := blockHashes(j.tokens, bs)
	// vLLM always computes a prompt's last token, so a hit stops one token short of the end.
	lookup := hashes[:(n-1)/bs]

	s.mu.Lock()
	cached := s.cache.hits(lookup) * bs
	s.queries += int64(n)
	s.hits += int64(cached)
	s.stats.PromptTokens += int64(n)
	s.stats.CachedTokens += int64(cached)
	s.mu.Unlock()

	computed, pulled := cached, 0
	if j.pull != nil {
		// The pulled KV covers the prompt it was made for: all of this one if it is the same,
		// else the full blocks the two share (a gateway that changed the prompt between legs
		// gets the rest prefilled here).
		covered := n
		if !slices.Equal(j.pull.tokens, j.tokens) {
			covered = commonPrefix(j.pull.tokens, j.tokens) / bs * bs
		}
		pulled = max(covered-cached, 0)
		computed = max(cached, covered)
	}
	cost := time.Duration(pulled)*s.cfg.TransferPerToken + time.Duration(n-computed)*s.cfg.PrefillPerToken
	prefilled := start.Add(cost)
	if sleepUntil(ctx, prefilled) != nil {
		return
	}
	s.mu.Lock()
	blockIDs := s.cache.store(hashes)
	if s.cfg.Role == RolePrefill && n%bs != 0 {
		blockIDs = append(blockIDs, s.cache.newID()) // the partial last block travels too
	}
	s.mu.Unlock()

	var params *transferParams
	if s.cfg.Role == RolePrefill {
		params = &transferParams{
			DoRemotePrefill: true, RemoteBlockIDs: [][]int{blockIDs}, RemoteEngineID: s.cfg.EngineID,
			RemoteRequestID: j.id, RemoteHost: s.host, RemotePort: s.port, TPSize: 1,
		}
	}
	u := usage{PromptTokens: n, CompletionTokens: j.maxTokens, TotalTokens: n + j.maxTokens}
	if cached > 0 {
		u.PromptTokensDetails = &tokenDetails{CachedTokens: cached}
	}
	if j.stream {
		s.stream(ctx, w, j, prefilled, u)
		return
	}
	if sleepUntil(ctx, prefilled.Add(time.Duration(j.maxTokens)*s.cfg.DecodePerToken)) != nil {
		return
	}
	if params != nil {
		s.cfg.Fabric.put(s.cfg.EngineID, j.id, &transfer{tokens: j.tokens, blockIDs: blockIDs, expires: time.Now().Add(s.cfg.TransferTTL)})
	}
	writeJSON(w, http.StatusOK, s.answer(j, u, params))
}

func commonPrefix(a, b []int64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// sleepUntil waits until t, or fails when ctx ends first. Deadlines rather than durations keep
// the per-token costs from accumulating timer overshoot.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// token is the text of every generated token.
const token = " tok"

type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	PromptTokensDetails *tokenDetails `json:"prompt_tokens_details,omitempty"`
}

type tokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// transferParams are a prefill answer's kv_transfer_params, as vLLM's NIXL connector writes them.
type transferParams struct {
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	RemoteBlockIDs  [][]int `json:"remote_block_ids"` // one list per KV-cache group
	RemoteEngineID  string  `json:"remote_engine_id"`
	RemoteRequestID string  `json:"remote_request_id"`
	RemoteHost      string  `json:"remote_host"`
	RemotePort      int     `json:"remote_port"`
	TPSize          int     `json:"tp_size"`
}

// answer is a whole (non-streamed) answer of j.maxTokens tokens.
func (s *Server) answer(j *job, u usage, params *transferParams) map[string]any {
	text := bytes.Repeat([]byte(token), j.maxTokens)
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": "length", "stop_reason": nil}
	object := "text_completion"
	if j.chat {
		object = "chat.completion"
		choice["message"] = map[string]any{"role": "assistant", "content": string(text), "tool_calls": []any{}}
	} else {
		choice["text"] = string(text)
	}
	return map[string]any{
		"id": j.id, "object": object, "created": time.Now().Unix(), "model": s.cfg.Model,
		"choices": []any{choice}, "usage": u, "kv_transfer_params": params,
	}
}

// stream sends j's tokens as SSE chunks, each when it is generated (prefilled plus
// DecodePerToken per token), then the usage chunk when asked for, then [DONE].
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, j *job, prefilled time.Time, u usage) {
	object, created := "text_completion", time.Now().Unix()
	if j.chat {
		object = "chat.completion.chunk"
	}
	chunk := func(choices []any, u *usage) []byte {
		m := map[string]any{"id": j.id, "object": object, "created": created, "model": s.cfg.Model, "choices": choices}
		if u != nil {
			m["usage"] = u
		}
		b, _ := json.Marshal(m)
		return fmt.Appendf(nil, "data: %s\n\n", b)
	}
	choice := func(first bool, finish any) []any {
		c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
		switch {
		case !j.chat:
			c["text"], c["stop_reason"] = token, nil
		case first:
			c["delta"] = map[string]any{"role": "assistant", "content": token}
		default:
			c["delta"] = map[string]any{"content": token}
		}
		return []any{c}
	}
	// Every chunk but the first and the last is the same: encode it once.
	middle := chunk(choice(false, nil), nil)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i := 1; i <= j.maxTokens; i++ {
		if sleepUntil(ctx, prefilled.Add(time.Duration(i)*s.cfg.DecodePerToken)) != nil {
			return
		}
		b := middle
		if i == 1 || i == j.maxTokens {
			var finish any
			if i == j.maxTokens {
				finish = "length"
			}
			b = chunk(choice(i == 1, finish), nil)
		}
		if _, err := w.Write(b); err != nil {
			return
		}
		_ = rc.Flush()
	}
	if j.includeUsage {
		_, _ = w.Write(chunk([]any{}, &u))
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}
