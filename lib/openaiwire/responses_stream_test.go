package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// streamEvent is one SSE event as a client reads it.
type streamEvent struct {
	typ  string
	data map[string]any
	raw  []byte
}

// checkEvents reads an event stream as the strictest clients do (§4.4: openai-node 7.x's
// responses.stream() accumulator, openai-go's top-level error rule, the Agents SDK's terminal
// event) and fails on anything they would refuse. With exact, it also holds every done event's
// text to its deltas (which late fragments of an already closed call break, by design). It
// returns the events and the terminal event's response.
func checkEvents(t testing.TB, b []byte, exact bool) ([]streamEvent, []byte) {
	t.Helper()
	if len(b) == 0 || !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("a stream ends with a blank line: %q", b)
	}
	var evs []streamEvent
	for i, block := range strings.Split(string(b[:len(b)-2]), "\n\n") {
		typ, data, ok := strings.Cut(block, "\ndata: ")
		if !ok || !strings.HasPrefix(typ, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("§4.1 event %d is not 'event: <type>\\ndata: <one-line JSON>': %q", i, block)
		}
		typ = strings.TrimPrefix(typ, "event: ")
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, data)
		}
		if m["type"] != typ {
			t.Fatalf("§4.1 data.type equals the event name: %q vs %v", typ, m["type"])
		}
		if m["sequence_number"] != float64(i) {
			t.Fatalf("§4.1 sequence_number from 0, +1 per event: event %d has %v", i, m["sequence_number"])
		}
		if _, has := m["error"]; has {
			t.Fatalf("§4.4 openai-go: no top-level error key: %s", data)
		}
		evs = append(evs, streamEvent{typ, m, []byte(data)})
	}
	if len(evs) < 3 || evs[0].typ != "response.created" || evs[1].typ != "response.in_progress" {
		t.Fatalf("§4.4 node: response.created first (then in_progress): %v", types(evs))
	}
	type item struct {
		id, callID, kind string
		parts            int
		text             string
		done             bool
	}
	var out []*item
	open := -1
	ids := map[string]bool{}
	for i, e := range evs[2:] {
		d := e.data
		idx := -1
		if f, ok := d["output_index"].(float64); ok {
			idx = int(f)
		}
		cur := func() *item {
			if idx < 0 || idx >= len(out) || idx != open {
				t.Fatalf("event %d %s: output_index %d is not the open item (%d)", i+2, e.typ, idx, open)
			}
			if id, ok := d["item_id"]; ok && id != out[idx].id {
				t.Fatalf("§4.4 node: item_id %v must match the item's id %s", id, out[idx].id)
			}
			return out[idx]
		}
		switch e.typ {
		case "response.output_item.added":
			if open >= 0 {
				t.Fatalf("§4.3 one open item at a time: %d still open at event %d", open, i+2)
			}
			if idx != len(out) {
				t.Fatalf("§4.4 node: output_item.added output_index %d must equal output.length %d", idx, len(out))
			}
			it := d["item"].(map[string]any)
			id, _ := it["id"].(string)
			callID, _ := it["call_id"].(string)
			kind, _ := it["type"].(string)
			if id == "" || ids[id] || (kind == "function_call" && callID == "") || it["status"] != "in_progress" {
				t.Fatalf("§4.4 node: a new item with a fresh non-empty id (and call_id): %s", e.raw)
			}
			ids[id] = true
			out = append(out, &item{id: id, callID: callID, kind: kind})
			open = idx
		case "response.content_part.added":
			it := cur()
			if d["content_index"] != float64(it.parts) || it.kind == "function_call" {
				t.Fatalf("§4.4 node: content_part.added appends: %s", e.raw)
			}
			it.parts++
		case "response.output_text.delta", "response.reasoning_text.delta":
			it := cur()
			if it.parts == 0 || d["content_index"] != float64(it.parts-1) {
				t.Fatalf("§6.4 content_part.added precedes the first delta: %s", e.raw)
			}
			it.text += d["delta"].(string)
		case "response.function_call_arguments.delta":
			it := cur()
			it.text += d["delta"].(string)
		case "response.output_text.done", "response.reasoning_text.done", "response.function_call_arguments.done":
			it := cur()
			got := d["text"]
			if e.typ == "response.function_call_arguments.done" {
				got = d["arguments"]
			}
			if exact && got != it.text {
				t.Fatalf("§8.7 the deltas concatenated are the done text: %q vs %q", it.text, got)
			}
		case "response.content_part.done":
			cur()
		case "response.output_item.done":
			it := cur()
			if d["item"].(map[string]any)["id"] != it.id {
				t.Fatalf("ids identical in every event: %s", e.raw)
			}
			it.done = true
			open = -1
		case "response.completed", "response.incomplete", "response.failed":
			if i+2 != len(evs)-1 {
				t.Fatalf("§4.1 the terminal event is the last: %v", types(evs))
			}
			if open >= 0 {
				t.Fatalf("§6.4 every item opened is closed before the end")
			}
			r := d["response"].(map[string]any)
			if "response."+r["status"].(string) != e.typ {
				t.Fatalf("§4.2 the status matches the event: %s", e.raw)
			}
			output := r["output"].([]any)
			if len(output) != len(out) {
				t.Fatalf("§4.4 Agents: the terminal event carries all items: %d, %d streamed", len(output), len(out))
			}
			for k, o := range output {
				o := o.(map[string]any)
				if o["id"] != out[k].id || (out[k].kind == "function_call" && o["call_id"] != out[k].callID) {
					t.Fatalf("§6.4 ids and call_ids identical in the terminal output: %v vs %+v", o, out[k])
				}
				text := ""
				switch out[k].kind {
				case "function_call":
					text = o["arguments"].(string)
				default:
					for _, c := range o["content"].([]any) {
						text += c.(map[string]any)["text"].(string)
					}
				}
				if exact && text != out[k].text {
					t.Fatalf("the terminal output's text is the deltas': %q vs %q", text, out[k].text)
				}
			}
			var raw struct{ Response json.RawMessage }
			_ = json.Unmarshal(e.raw, &raw)
			return evs, raw.Response
		default:
			t.Fatalf("§4.4 node: an event type outside the SDK's union: %s", e.typ)
		}
	}
	t.Fatalf("no terminal event: %v", types(evs))
	return nil, nil
}

func types(evs []streamEvent) []string {
	var s []string
	for _, e := range evs {
		s = append(s, e.typ)
	}
	return s
}

// runStream feeds chunks and finishes with err.
func runStream(t testing.TB, meta ResponsesMeta, chunks []string, err error) (events, response []byte) {
	t.Helper()
	s := NewResponsesStream(meta)
	var out []byte
	for _, c := range chunks {
		var cerr error
		out, cerr = s.Chunk(out, []byte(c))
		if cerr != nil && err == nil {
			err = cerr
		}
	}
	return s.Finish(out, err)
}

func chatChunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}]}`
}

const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"completion_tokens_details":{"reasoning_tokens":2}}}`

func TestResponsesStreamCanonicalOrder(t *testing.T) {
	t.Run("§4.3 text answer", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{chatChunk(`{"role":"assistant","content":""}`, ""), chatChunk(`{"content":"Hel"}`, ""),
			chatChunk(`{"content":"lo"}`, ""), chatChunk(`{}`, "stop"), usageChunk, "[DONE]"}, nil)
		evs, _ := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
			"response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
	})
	t.Run("§4.3 two function calls, not interleaved, no content_part events", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{
			chatChunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_Y","type":"function","function":{"name":"search","arguments":""}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"q"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\":1}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"call_Z","type":"function","function":{"name":"search","arguments":"{}"}}]}`, ""),
			chatChunk(`{}`, "tool_calls"), usageChunk}, nil)
		evs, final := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
			"response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
		r := decodeResponse(t, final)
		if r.Output[0].CallID != "call_Y" || r.Output[1].CallID != "call_Z" || r.Output[0].Arguments != `{"q":1}` {
			t.Errorf("§8.7 call_id identical across added, done and completed: %s", final)
		}
	})
	t.Run("§4.3 reasoning then text: reasoning item at 0 with reasoning_text part, message at 1", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{chatChunk(`{"reasoning":"hm"}`, ""), chatChunk(`{"reasoning_content":"m"}`, ""), chatChunk(`{"content":"A"}`, "stop")}, nil)
		evs, _ := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
			"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
			"response.content_part.done", "response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
		if p := evs[3].data["part"].(map[string]any); p["type"] != "reasoning_text" {
			t.Errorf("part %v", p)
		}
	})
}

// assemble builds the whole chat completion a stream's chunks make, as the gateway's chat
// stream assembler would: content and reasoning concatenated, tool calls by index.
func assemble(t *testing.T, chunks []string) []byte {
	t.Helper()
	var content, reasoning strings.Builder
	var calls []ToolCall
	byIndex := map[int]int{}
	var finish *string
	a := ChatCompletion{Header: Header{ID: "chatcmpl-1", Object: "chat.completion", Model: "qwen3"}}
	for _, s := range chunks {
		if s == "[DONE]" {
			continue
		}
		c, err := DecodeChunk([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			a.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finish = ch.FinishReason
			}
			if ch.Delta == nil {
				continue
			}
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
			for _, tc := range ch.Delta.ToolCalls {
				k, ok := byIndex[tc.Index]
				if !ok {
					k = len(calls)
					byIndex[tc.Index] = k
					calls = append(calls, ToolCall{ID: tc.ID, Type: "function", Function: Function{Name: tc.Function.Name}})
				}
				calls[k].Function.Arguments += tc.Function.Arguments
			}
		}
	}
	text, r := content.String(), reasoning.String()
	msg := Message{Role: "assistant", Content: &text, ToolCalls: calls}
	if r != "" {
		msg.ReasoningContent = &r
	}
	a.Choices = []ChatChoice{{Message: msg, FinishReason: finish}}
	return a.AppendJSON(nil, Options{})
}

func TestResponsesStreamMatchesWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunks []string
	}{
		{"reasoning, text, two calls, usage", []string{
			chatChunk(`{"role":"assistant","content":""}`, ""), chatChunk(`{"reasoning":"Let me "}`, ""), chatChunk(`{"reasoning":"check."}`, ""),
			chatChunk(`{"content":"Checking "}`, ""), chatChunk(`{"content":"the <weather> \u2028é."}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"functions.get_time:1","type":"function","function":{"name":"get_time","arguments":"{}"}}]}`, ""),
			chatChunk(`{}`, "tool_calls"), usageChunk, "[DONE]"}},
		{"§6.2 length: incomplete, the message incomplete", []string{chatChunk(`{"content":"Once upon"}`, ""), chatChunk(`{"content":" a"}`, "length"), usageChunk}},
		{"§6.3 white space before a tool call is no message", []string{chatChunk(`{"content":"\n\n"}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, "tool_calls")}},
		{"white space that leads text goes into the first delta", []string{chatChunk(`{"content":"\n "}`, ""), chatChunk(`{"content":"Hi"}`, "stop")}},
		{"an answer of white space only is a message", []string{chatChunk(`{"content":"  "}`, ""), chatChunk(`{}`, "stop")}},
		{"an empty answer is an empty message", []string{chatChunk(`{"role":"assistant"}`, ""), chatChunk(`{}`, "stop")}},
		{"reasoning only", []string{chatChunk(`{"reasoning":"hm"}`, "stop")}},
		{"§6.2 a call without an id gets a minted call_id; a repeated id too", []string{
			chatChunk(`{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"x","function":{"name":"b","arguments":"1"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":2,"id":"x","function":{"name":"c","arguments":"2"}}]}`, "tool_calls")}},
		{"content_filter", []string{chatChunk(`{"content":"no"}`, "content_filter")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			events, final := runStream(t, testMeta, c.chunks, nil)
			_, terminal := checkEvents(t, events, true)
			if !bytes.Equal(terminal, final) {
				t.Errorf("Finish's response is the terminal event's:\n%s\n%s", terminal, final)
			}
			whole, err := ChatToResponse(assemble(t, c.chunks), testMeta)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(final, whole) {
				t.Errorf("§4.1 the terminal event's response is ChatToResponse of the assembled answer:\nstream %s\nwhole  %s", final, whole)
			}
		})
	}
}

func TestResponsesStreamEndings(t *testing.T) {
	text := []string{chatChunk(`{"content":"Hel"}`, "")}
	for _, c := range []struct {
		name   string
		chunks []string
		err    error
		status string
		msg    string
	}{
		{"§6.3 upstream error mid-stream: response.failed, the open item incomplete", text, errors.New("connection reset"), "failed", "connection reset"},
		{"a stream that ends with no finish_reason ended early", append(text, "[DONE]"), nil, "failed", "ended before"},
		{"an upstream error event", append(text, `{"error":{"message":"boom","type":"InternalServerError","code":500}}`), nil, "failed", "boom"},
		{"§8.17 length: response.incomplete, not response.completed", []string{chatChunk(`{"content":"a"}`, "length")}, nil, "incomplete", ""},
		{"abort is failed: no SDK knows a cancelled event", []string{chatChunk(`{"content":"a"}`, "abort")}, nil, "failed", "abort"},
		{"failure before any chunk", nil, errors.New("timeout"), "failed", "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			events, final := runStream(t, testMeta, c.chunks, c.err)
			evs, _ := checkEvents(t, events, true)
			if last := evs[len(evs)-1].typ; last != "response."+c.status {
				t.Errorf("terminal %s", last)
			}
			r := decodeResponse(t, final)
			if r.Status != c.status {
				t.Errorf("status %s", final)
			}
			if c.status == "failed" && (r.Error == nil || r.Error.Code != "server_error" || !strings.Contains(r.Error.Message, c.msg)) {
				t.Errorf("§4.4 failed carries error{code:server_error,message}: %s", final)
			}
			for _, o := range r.Output {
				if o.Status != "incomplete" {
					t.Errorf("§6.4 the cut item is incomplete: %s", final)
				}
			}
		})
	}
	t.Run("an unreadable chunk is an error and changes nothing; a second Finish appends nothing", func(t *testing.T) {
		s := NewResponsesStream(testMeta)
		out, err := s.Chunk(nil, []byte(`{"choices":[`))
		if err == nil || len(out) != 0 {
			t.Fatalf("%q, %v", out, err)
		}
		out, _ = s.Chunk(out, []byte(chatChunk(`{"content":"x"}`, "stop")))
		out, r1 := s.Finish(out, nil)
		out2, r2 := s.Finish(out, nil)
		if len(out2) != len(out) || !bytes.Equal(r1, r2) {
			t.Error("a second Finish")
		}
		if after, _ := s.Chunk(out, []byte(chatChunk(`{"content":"y"}`, ""))); len(after) != len(out) {
			t.Error("chunks after the end")
		}
		checkEvents(t, out, true)
	})
	t.Run("Start once: the caller sends created and in_progress when the upstream answered", func(t *testing.T) {
		s := NewResponsesStream(testMeta)
		out := s.Start(nil)
		out = s.Start(out)
		if n := bytes.Count(out, []byte("event: ")); n != 2 {
			t.Errorf("%d events", n)
		}
		out, _ = s.Chunk(out, []byte(chatChunk(`{"content":"x"}`, "stop")))
		out, _ = s.Finish(out, nil)
		checkEvents(t, out, true)
	})
}

func ExampleResponsesStream() {
	meta := ResponsesMeta{ID: "resp_1", Model: "m", Store: true}
	s := NewResponsesStream(meta)
	var out []byte
	for _, data := range []string{
		`{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`,
		`[DONE]`,
	} {
		out, _ = s.Chunk(out, []byte(data))
	}
	out, _ = s.Finish(out, nil)
	for _, line := range strings.Split(string(out), "\n") {
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			fmt.Println(typ)
		}
	}
	// Output:
	// response.created
	// response.in_progress
	// response.output_item.added
	// response.content_part.added
	// response.output_text.delta
	// response.output_text.done
	// response.content_part.done
	// response.output_item.done
	// response.completed
}
