package responses

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/responsestate"
)

// GET /v1/responses/{id}?stream=true answers a stored response as the event stream that makes
// it (the SDKs' retrieve with stream, and openai-node's responses.stream({response_id}) that
// resumes one), from the event after starting_after. A background response still running is
// waited for (the store polled every replayPoll), then replayed: the gateway keeps responses,
// not their events, so a replay is made from the stored Response, one delta per part.

// replayPoll is how often a replay of a running background response looks for its end.
const replayPoll = 200 * time.Millisecond

func (h *Handler) replay(w http.ResponseWriter, r *http.Request, rec *responsestate.Record) {
	after := -1
	if s := r.URL.Query().Get("starting_after"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, &openaiwire.ResponsesError{Message: "starting_after must be a sequence number, 0 or more.",
				Type: "invalid_request_error", Param: "starting_after", Code: "invalid_value"})
			return
		}
		after = n
	}
	owner := h.opts.Owner(r.Context())
	for !ended(responseStatus(rec.Response)) {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(replayPoll):
		}
		var err error
		if rec, err = h.store.Get(r.Context(), owner, rec.ID); err != nil {
			if errors.Is(err, responsestate.ErrNotFound) {
				writeError(w, notFound(rec.ID))
			} else {
				writeError(w, storeDown(err))
			}
			return
		}
	}
	events, err := replayEvents(rec.Response)
	if err != nil {
		h.log.Warn("responses: a stored response cannot be replayed", "id", rec.ID, "err", err)
		writeError(w, &apiError{status: http.StatusInternalServerError, ResponsesError: openaiwire.ResponsesError{
			Message: "The stored response cannot be replayed.", Type: "server_error"}})
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var client httpapi.EventSender
	for i, ev := range events {
		if i > after {
			if client.Send(w, ev) != nil {
				return
			}
		}
	}
}

// ended reports whether a Response's status is final.
func ended(status string) bool {
	return status != "queued" && status != "in_progress" && status != ""
}

// replayEvents are the events that make resp, as SSE, the i-th with sequence_number i.
func replayEvents(resp []byte) ([][]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(resp, &top); err != nil {
		return nil, err
	}
	var output []json.RawMessage
	if err := json.Unmarshal(top["output"], &output); err != nil {
		return nil, err
	}
	var status string
	_ = json.Unmarshal(top["status"], &status)
	var events [][]byte
	ev := func(typ string, members ...string) {
		b := []byte(`event: ` + typ + "\ndata: {\"type\":" + string(quote(typ)) + `,"sequence_number":` + strconv.Itoa(len(events)))
		for i := 0; i+1 < len(members); i += 2 {
			b = append(b, ',')
			b = append(b, quote(members[i])...)
			b = append(b, ':')
			b = append(b, members[i+1]...)
		}
		events = append(events, append(b, "}\n\n"...))
	}
	started := cloneWith(top, map[string]string{"status": `"in_progress"`, "output": `[]`, "usage": "null", "completed_at": "null"})
	ev("response.created", "response", started)
	ev("response.in_progress", "response", started)
	for i, raw := range output {
		var item map[string]json.RawMessage
		if err := json.Unmarshal(raw, &item); err != nil {
			return nil, err
		}
		var typ string
		_ = json.Unmarshal(item["type"], &typ)
		idx := strconv.Itoa(i)
		itemID := string(item["id"])
		if itemID == "" {
			itemID = "null"
		}
		var parts []json.RawMessage
		_ = json.Unmarshal(item["content"], &parts)
		switch typ {
		case "message", "reasoning":
			ev("response.output_item.added", "output_index", idx, "item", cloneWith(item, map[string]string{"status": `"in_progress"`, "content": "[]"}))
			for j, p := range parts {
				var part struct {
					Type    string          `json:"type"`
					Text    json.RawMessage `json:"text"`
					Refusal json.RawMessage `json:"refusal"`
				}
				if err := json.Unmarshal(p, &part); err != nil {
					return nil, err
				}
				part.Text, part.Refusal = orEmpty(part.Text), orEmpty(part.Refusal)
				at := []string{"item_id", itemID, "output_index", idx, "content_index", strconv.Itoa(j)}
				switch part.Type {
				case "output_text":
					empty := cloneWith(mustObject(p), map[string]string{"text": `""`})
					ev("response.content_part.added", append(at, "part", empty)...)
					ev("response.output_text.delta", append(at, "delta", string(part.Text), "logprobs", "[]")...)
					ev("response.output_text.done", append(at, "text", string(part.Text), "logprobs", "[]")...)
					ev("response.content_part.done", append(at, "part", string(p))...)
				case "refusal":
					empty := cloneWith(mustObject(p), map[string]string{"refusal": `""`})
					ev("response.content_part.added", append(at, "part", empty)...)
					ev("response.refusal.delta", append(at, "delta", string(part.Refusal))...)
					ev("response.refusal.done", append(at, "refusal", string(part.Refusal))...)
					ev("response.content_part.done", append(at, "part", string(p))...)
				case "reasoning_text":
					empty := cloneWith(mustObject(p), map[string]string{"text": `""`})
					ev("response.content_part.added", append(at, "part", empty)...)
					ev("response.reasoning_text.delta", append(at, "delta", string(part.Text))...)
					ev("response.reasoning_text.done", append(at, "text", string(part.Text))...)
					ev("response.content_part.done", append(at, "part", string(p))...)
				}
			}
		case "function_call":
			ev("response.output_item.added", "output_index", idx, "item", cloneWith(item, map[string]string{"status": `"in_progress"`, "arguments": `""`}))
			args := string(item["arguments"])
			if args == "" {
				args = `""`
			}
			ev("response.function_call_arguments.delta", "item_id", itemID, "output_index", idx, "delta", args)
			ev("response.function_call_arguments.done", "item_id", itemID, "output_index", idx, "arguments", args)
		default:
			ev("response.output_item.added", "output_index", idx, "item", string(raw))
		}
		ev("response.output_item.done", "output_index", idx, "item", string(raw))
	}
	terminal := "response." + status
	if status != "completed" && status != "incomplete" {
		terminal = "response.failed" // cancelled too: no SDK knows a response.cancelled event
	}
	ev(terminal, "response", string(resp))
	return events, nil
}

// orEmpty is v, or an empty JSON string when v is absent.
func orEmpty(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage(`""`)
	}
	return v
}

// cloneWith is obj as JSON with the members of set replaced (or added), set's values JSON.
func cloneWith(obj map[string]json.RawMessage, set map[string]string) string {
	c := make(map[string]json.RawMessage, len(obj)+len(set))
	for k, v := range obj {
		c[k] = v
	}
	for k, v := range set {
		c[k] = json.RawMessage(v)
	}
	b, _ := json.Marshal(c) // raw values from a parsed document and literals: always valid
	return string(b)
}

// mustObject is a JSON object's members (none for anything else).
func mustObject(raw []byte) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	return m
}
