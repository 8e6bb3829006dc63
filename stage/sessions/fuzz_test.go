package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
)

// FuzzSessionID: whatever the header and body say, sessionID neither panics nor accepts an id
// it does not return, and the stage looks up only ids of NewID's shape.
func FuzzSessionID(f *testing.F) {
	id := NewID()
	f.Add("", `{"model":"m","messages":[]}`)
	f.Add(id, `{"model":"m","messages":[]}`)
	f.Add("", `{"model":"m","session_id":"`+id+`"}`)
	f.Add(id, `{"model":"m","session_id":"`+id+`"}`)
	f.Add("x", `{"model":"m","session_id":7}`)
	f.Add("", `{"model":"m","session_id":"sess_\u0041AAAAAAAAAAAAAAAAAAAAA"}`)
	f.Add("sess_../../x", `{"model":"m","session_id":null}`)
	f.Fuzz(func(t *testing.T, header, body string) {
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
		if err != nil {
			return
		}
		req.Header = http.Header{HeaderSessionID: {header}}
		got, ok, err := sessionID(req)
		if err != nil {
			var e *pipeline.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if ok != (got != "") {
			t.Fatalf("ok %v for id %q", ok, got)
		}
		if header != "" && ok && got != header {
			t.Fatalf("header %q but id %q", header, got)
		}
		if ValidID(got) && (len(got) != idLen || got[:5] != "sess_") {
			t.Fatalf("ValidID accepted %q", got)
		}
	})
}

// FuzzDecodeSession: a stored value (from Redis: outside the process) decodes or errs, never
// panics; what decodes is valid and encodes back to a value that decodes the same.
func FuzzDecodeSession(f *testing.F) {
	s := &Session{ID: NewID(), Owner: "k", Model: "m", Created: time.UnixMilli(1), Expires: time.UnixMilli(2), TTL: time.Second,
		Endpoint: "e", Messages: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)}}
	b, _ := encodeSession(s)
	f.Add(b)
	f.Add([]byte(`{"id":"sess_AAAAAAAAAAAAAAAAAAAAAA","model":"m","ttl_ms":1,"messages":[1]}`))
	f.Add([]byte(`{"id":"sess_AAAAAAAAAAAAAAAAAAAAAA","model":"m","ttl_ms":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSession(b, 1<<16)
		if err != nil {
			return
		}
		if !ValidID(s.ID) || s.Model == "" || s.TTL <= 0 {
			t.Fatalf("decoded an invalid session %+v", s)
		}
		again, err := encodeSession(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := decodeSession(again, 1<<20)
		if err != nil {
			t.Fatalf("re-encoded session does not decode: %v", err)
		}
		if s2.ID != s.ID || s2.Owner != s.Owner || len(s2.Messages) != len(s.Messages) {
			t.Fatalf("round trip changed the session: %+v, %+v", s, s2)
		}
	})
}

// FuzzAssistantMessage: an upstream answer yields a message object with role assistant, or
// nothing.
func FuzzAssistantMessage(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi","reasoning_content":"r","tool_calls":[]},"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"choices":[{"index":1,"message":{"content":"x"},"finish_reason":"stop"},{"index":0,"message":{"content":null,"tool_calls":[{"id":"1"}]},"finish_reason":"tool_calls"}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":null}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"message":null,"finish_reason":"stop"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, ok := assistantMessage(b)
		if !ok {
			return
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(msg, &v); err != nil {
			t.Fatalf("message %s does not decode: %v", msg, err)
		}
		if string(v["role"]) != `"assistant"` || role(msg) != "assistant" {
			t.Fatalf("message %s is not the assistant's", msg)
		}
		if _, has := v["reasoning_content"]; has {
			t.Fatalf("message %s keeps the reasoning", msg)
		}
	})
}

// FuzzTurnRequest: any request body of a turn is refused with a 400 or sent on with the
// session's history before its own messages and no session_id.
func FuzzTurnRequest(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	f.Add(`{"model":"m","session_id":"x","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"max_tokens":5}`)
	f.Add(`{"model":"m","messages":"no"}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":1e9}`)
	hist := []json.RawMessage{json.RawMessage(`{"role":"system","content":"S"}`),
		json.RawMessage(`{"role":"user","content":"q0"}`), json.RawMessage(`{"role":"assistant","content":"a0"}`)}
	mgr := New(Options{Store: NewMemory(MemoryOptions{})})
	f.Fuzz(func(t *testing.T, body string) {
		checkTurnBody(t, mgr, []byte(body))
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
		if err != nil || req.Model() != "m" {
			return
		}
		s := &Session{ID: NewID(), Model: "m", TTL: time.Hour, Messages: hist}
		sent, _, err := mgr.prepare(context.Background(), req, s, ModelOptions{ContextWindow: 50}.withDefaults())
		if err != nil {
			var e *pipeline.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		f, err := req.Fields()
		if err != nil {
			t.Fatalf("the rewritten body does not decode: %v", err)
		}
		if _, has := f["session_id"]; has {
			t.Fatal("session_id sent upstream")
		}
		var got []json.RawMessage
		if err := json.Unmarshal(f["messages"], &got); err != nil || len(got) != len(sent) {
			t.Fatalf("messages sent %d, in the body %s", len(sent), f["messages"])
		}
	})
}

// FuzzCreate: POST /v1/sessions' body parses or is a 400.
func FuzzCreate(f *testing.F) {
	f.Add([]byte(`{"model":"m"}`))
	f.Add([]byte(`{"model":"m","ttl_seconds":60}`))
	f.Add([]byte(`{"model":"m","ttl_seconds":null}`))
	f.Add([]byte(`{"model":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := parseCreate(b)
		if err != nil {
			if err.Status != http.StatusBadRequest {
				t.Fatalf("status %d", err.Status)
			}
			return
		}
		if req.Model == "" {
			t.Fatal("no model accepted")
		}
	})
}
