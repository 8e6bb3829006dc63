package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzResponsesToChat: any body and stored item either translate into a JSON chat body, whose
// echoed members are JSON too, or are refused with a *ResponsesError; never a panic.
func FuzzResponsesToChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"https://x","detail":"low"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"},{"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"}]},"text":{"format":{"type":"json_schema","name":"n","schema":{}}},"max_output_tokens":5,"stream":true,"reasoning":{"effort":"low"},"include":["message.output_text.logprobs"],"top_logprobs":2}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"p","output":[{"type":"input_text","text":"x"}]}]}`,
		`{"model":"m","tools":[{"type":"web_search"}]}`, `{"model":"\ud800","input":"\u00e9\"\\"}`, `{"model":1}`, `[]`, ``, `{"model":"m","input":[{"role":"system","content":[]}]}`,
	} {
		f.Add([]byte(s), []byte(`{"type":"function_call","call_id":"p","name":"f","arguments":"{}"}`))
	}
	f.Fuzz(func(t *testing.T, body, prev []byte) {
		var items []Raw
		if len(prev) > 0 {
			items = []Raw{prev}
		}
		chat, meta, err := ResponsesToChat(body, items)
		if err != nil {
			var re *ResponsesError
			if !errors.As(err, &re) || re.Type != "invalid_request_error" || !json.Valid(re.AppendJSON(nil)) {
				t.Fatalf("not a typed error: %#v", err)
			}
			return
		}
		if !json.Valid(chat) {
			t.Fatalf("chat body is not JSON: %s", chat)
		}
		var m struct {
			Model    string
			Messages []json.RawMessage
		}
		if err := json.Unmarshal(chat, &m); err != nil || len(m.Messages) == 0 {
			t.Fatalf("chat body without model or messages: %s (%v)", chat, err)
		}
		meta.ID = "resp_f"
		resp, err := ChatToResponse([]byte(`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":"stop"}]}`), meta)
		if err != nil || !json.Valid(resp) {
			t.Fatalf("the response echoing the request is not JSON: %s (%v)", resp, err)
		}
		// The stored turn replays: its items are JSON and translate again.
		turn, err := ResponsesTurnItems(body, resp)
		if err != nil {
			t.Fatalf("turn items: %v", err)
		}
		for _, it := range turn {
			if !json.Valid(it) {
				t.Fatalf("turn item not JSON: %s", it)
			}
		}
		if _, _, err := ResponsesToChat([]byte(`{"model":"m","input":"next"}`), append(items, turn...)); err != nil {
			t.Fatalf("a stored turn does not continue: %v", err)
		}
	})
}

// FuzzResponsesStream: any sequence of chunks (the input's lines) and any ending gives a stream
// that the strict client-side checker accepts: SSE framing, sequence numbers from 0 without a
// gap, items opened and closed in order with matching ids, one terminal event carrying them all.
func FuzzResponsesStream(f *testing.F) {
	seed := func(chunks ...string) []byte { return []byte(joinLines(chunks)) }
	f.Add(seed(chatChunk(`{"reasoning":"a"}`, ""), chatChunk(`{"content":"b"}`, ""), chatChunk(`{"tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{"}}]}`, ""),
		chatChunk(`{"tool_calls":[{"index":1,"function":{"arguments":"1"}}]}`, ""), chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}`, "tool_calls"), usageChunk, "[DONE]"), false)
	f.Add(seed(chatChunk(`{"content":" "}`, ""), chatChunk(`{"content":"x"}`, "length")), true)
	f.Add(seed(`{"error":{"message":"m"}}`, `{"choices":[{"index":1,"delta":{"content":"z"}}]}`, `{`), false)
	f.Add(seed(chatChunk(`{"tool_calls":[{"index":0,"id":"a"},{"index":0,"id":"b"},{"index":0,"id":"a"}]}`, "stop")), false)
	f.Fuzz(func(t *testing.T, data []byte, cut bool) {
		var err error
		if cut {
			err = errors.New("cut")
		}
		events, final := runStream(t, ResponsesMeta{ID: "resp_z", Model: "m"}, splitLines(data), err)
		_, terminal := checkEvents(t, events, false)
		if !bytes.Equal(terminal, final) {
			t.Fatalf("Finish's response differs from the terminal event's")
		}
	})
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for i, l := range s {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
	}
	return b.String()
}

func splitLines(b []byte) []string {
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		out = append(out, string(l))
	}
	return out
}
