package vllmsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// messages serves Anthropic's Messages API as vLLM (0.12 and later) does at /v1/messages: the
// same generation as a chat completion (max_tokens tokens of " tok", stop_reason "max_tokens"),
// in Anthropic's shapes, whole or as its event stream. It runs through the scheduler and is
// charged like a chat completion, but reads no prefix cache: gateways pass these requests
// through unchanged, so no test needs its cache effects.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	s.mu.Lock()
	s.stats.Requests++
	s.lastBody, s.lastHeader = body, r.Header.Clone()
	s.mu.Unlock()
	anthropicError := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": "invalid_request_error", "message": msg}})
		_, _ = w.Write(b)
	}
	var req struct {
		Model     string    `json:"model"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
		Messages  []message `json:"messages"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil {
		anthropicError(http.StatusBadRequest, "the request body is not a Messages request")
		return
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		anthropicError(http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	if req.MaxTokens < 1 {
		anthropicError(http.StatusBadRequest, "max_tokens: must be at least 1")
		return
	}
	tokens, apiErr := chatTokens(req.Messages)
	if apiErr != nil {
		anthropicError(apiErr.status, apiErr.msg)
		return
	}
	n := min(req.MaxTokens, s.cfg.MaxModelLen)
	if err := s.sched.acquire(r.Context()); err != nil {
		return
	}
	defer s.sched.release()
	start := time.Now()
	prefilled := start.Add(time.Duration(len(tokens)) * s.cfg.PrefillPerToken)
	s.count(func(st *Stats) { st.PromptTokens += int64(len(tokens)) })
	id := fmt.Sprintf("msg_sim%d", start.UnixNano())
	usage := map[string]int{"input_tokens": len(tokens), "output_tokens": n}
	if !req.Stream {
		if sleepUntil(r.Context(), prefilled.Add(time.Duration(n)*s.cfg.DecodePerToken)) != nil {
			return
		}
		text := strings.Repeat(token, n)
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": s.cfg.Model,
			"content": []map[string]string{{"type": "text", "text": text}}, "stop_reason": "max_tokens", "stop_sequence": nil,
			"usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	event := func(name string, data any) bool {
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !event("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message",
		"role": "assistant", "model": s.cfg.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": len(tokens), "output_tokens": 0}}}) ||
		!event("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]string{"type": "text", "text": ""}}) {
		return
	}
	for i := 1; i <= n; i++ {
		if sleepUntil(r.Context(), prefilled.Add(time.Duration(i)*s.cfg.DecodePerToken)) != nil ||
			!event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": token}}) {
			return
		}
	}
	_ = event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "max_tokens", "stop_sequence": nil},
			"usage": map[string]int{"output_tokens": n}}) &&
		event("message_stop", map[string]any{"type": "message_stop"})
}
