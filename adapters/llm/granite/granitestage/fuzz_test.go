package granitestage

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/infergate/infergate/adapters/llm/granite"
	"github.com/infergate/infergate/adapters/pipeline"
)

// FuzzDecode: any client body either decodes into a request the processor renders or refuses
// with a 400 (a *pipeline.Error or a *granite.ValidationError), never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"g","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"g","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"thinking":true,"max_completion_tokens":5}`,
		`{"model":"g","messages":[{"role":"user","content":"q"}],"chat_template_kwargs":{"documents":[{"doc_id":1,"text":"d"}],"controls":{"citations":true,"length":"short"}}}`,
		`{"model":"g","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","content":"x","tool_call_id":"c"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`,
		`{"model":"g","messages":[{"role":"developer","content":"s"}],"tools":[{"name":"flat"}],"sanitize":"aggressive","stop":["x"]}`,
		`{"model":"g","messages":[{"role":"user","content":"x"}],"logprobs":true}`,
		`{"model":"g","messages":{}}`,
	} {
		f.Add([]byte(s))
	}
	p := granite.New(granite.V33)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := pipeline.NewRequest(chatPath, body)
		if err != nil {
			return
		}
		fields, err := req.Fields()
		if err != nil {
			return
		}
		in, err := decode(fields)
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 {
				t.Fatalf("not a 400: %v", err)
			}
			return
		}
		if _, err := json.Marshal(in.Params); err != nil {
			t.Fatalf("params do not encode: %v", err)
		}
		if _, err := p.Render(in, true); err != nil {
			var ve *granite.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("render: %v", err)
			}
		}
	})
}

// FuzzChatStream feeds arbitrary bytes to the stream path as an upstream's SSE body: it never
// panics, every event it sends is JSON, and it ends with [DONE] or an error.
func FuzzChatStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"index\":0,\"text\":\"<think>a</think><response>b\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"</response>\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Add([]byte("data: {\"choices\":[{\"index\":1,\"text\":\"x <co>1\"},{\"index\":0,\"text\":\"[{\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\n"), uint8(2))
	f.Add([]byte("data: {\"error\":{\"message\":\"fire\"}}\n\n"), uint8(0))
	f.Add([]byte("data: {\"choices\":[{\"index\":9999,\"text\":\"x\"}]}\n\n"), uint8(0))
	f.Add([]byte("data: not json\n\n"), uint8(3))
	f.Add([]byte("\x00\x1f\"\\<>&\u2028\u2029\xff\xc3 é\t\r\n"), uint8(0))
	p := granite.New(granite.V33)
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		in := &granite.ChatRequest{Thinking: mode&1 != 0}
		if mode&2 != 0 {
			in.Controls = &granite.Controls{Citations: true}
		}
		if want, _ := json.Marshal(string(body)); string(appendJSONString(nil, string(body))) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", body, appendJSONString(nil, string(body)), want)
		}
		up := pipeline.NewBody(body, pipeline.Usage{})
		c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: p, in: in, max: 1 << 16, head: chunk{ID: "x", Object: "chat.completion.chunk"}}
		out, err := io.ReadAll(c)
		if err == nil && !bytes.HasSuffix(out, []byte("data: [DONE]\n\n")) {
			t.Fatalf("ended without [DONE]: %q", out)
		}
		ev := pipeline.NewEvents(bytes.NewReader(out))
		for {
			data, err := ev.Next()
			if err != nil {
				break
			}
			if !json.Valid(data) {
				t.Fatalf("event is not JSON: %q", data)
			}
		}
	})
}
