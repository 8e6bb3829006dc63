package responses

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/infergate/infergate/store/responsestate"
)

// FuzzNativeStream: whatever an upstream's /v1/responses stream holds, the gateway never
// panics, writes only whole events, and stores a response only when a terminal event passed.
func FuzzNativeStream(f *testing.F) {
	f.Add([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_a\",\"output\":[]}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_a\",\"output\":[{\"type\":\"message\",\"content\":\"x\"}]}}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.completed\",\"response\":[1]}\n\n"))
	f.Add([]byte("data: {\"type\":\"response.failed\",\"response\":{\"id\":7}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"message\":\"boom\"}\n\n"))
	f.Add([]byte("data: {\"response\":{\"id\":\"resp_b\",\"output\":{}},\"type\":\"response.incomplete\"}\r\n\r\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		st := responsestate.NewMemory(responsestate.MemoryOptions{})
		h := New(Options{
			Chat: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("translated") }),
			Mode: func(string) Mode { return Native },
			NativeHandler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write(stream)
			}),
			Endpoints: func(string) []string { return []string{"a"} },
			Store:     st,
		})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/responses", strings.NewReader(`{"model":"m","input":"x","stream":true}`)))
		out := w.Body.String()
		if out != "" && !strings.HasSuffix(out, "\n\n") {
			t.Fatalf("a cut event: %q", out)
		}
		terminal := strings.Contains(out, "event: response.completed\n") || strings.Contains(out, "event: response.incomplete\n") ||
			strings.Contains(out, "event: response.failed\n")
		for ev := range strings.SplitSeq(strings.TrimSuffix(out, "\n\n"), "\n\n") {
			if ev == "" {
				continue
			}
			_, data, ok := strings.Cut(ev, "\ndata: ")
			if !ok || !json.Valid([]byte(data)) {
				t.Fatalf("an event that is not JSON: %q", ev)
			}
		}
		if !terminal && strings.Contains(out, "response.") {
			if !strings.Contains(out, "event: error\n") {
				t.Fatalf("a stream ended without its end: %q", out)
			}
		}
		_ = context.Background()
	})
}

// FuzzInputItems: any request body the translation takes gives input items that are JSON, each
// with an id, and pages of them that are JSON.
func FuzzInputItems(f *testing.F) {
	f.Add([]byte(`{"input":"hi"}`))
	f.Add([]byte(`{"input":[{"role":"user","content":"one"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x","id":"fco_1"}]}`))
	f.Add([]byte(`{"input":[{"role":"assistant","content":"\u2028\ud800"},{"type":"reasoning","summary":[]},{}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := inputItems(body, "resp_abc")
		if err != nil {
			return
		}
		for _, it := range items {
			if !json.Valid(it) || itemID(it) == "" {
				t.Fatalf("an item without an id, or not JSON: %s", it)
			}
		}
		for _, desc := range []bool{false, true} {
			page, err := itemPage(items, desc, "", 2)
			if err != nil || !json.Valid(page) {
				t.Fatalf("a page: %v %s", err, page)
			}
		}
	})
}

// FuzzReplay: whatever a stored response holds, its replay never panics and every event it
// makes is one JSON object with its sequence number.
func FuzzReplay(f *testing.F) {
	f.Add([]byte(`{"id":"resp_1","status":"completed","output":[{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"hi","annotations":[]},{"type":"refusal","refusal":"no"}]},{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"},{"type":"reasoning","id":"rs_1","content":[{"type":"reasoning_text","text":"t"}]},{"type":"web_search_call"}]}`))
	f.Add([]byte(`{"status":"cancelled","output":[{"content":[1]}]}`))
	f.Add([]byte(`{"output":{}}`))
	f.Fuzz(func(t *testing.T, resp []byte) {
		events, err := replayEvents(resp)
		if err != nil {
			return
		}
		for i, ev := range events {
			_, data, ok := strings.Cut(string(ev), "\ndata: ")
			var e struct {
				Seq int `json:"sequence_number"`
			}
			if !ok || json.Unmarshal([]byte(strings.TrimSuffix(data, "\n\n")), &e) != nil || e.Seq != i {
				t.Fatalf("event %d is not one JSON object with its number: %q", i, ev)
			}
		}
	})
}
