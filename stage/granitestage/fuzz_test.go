package granitestage

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/openaiwire"
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
		`{"model":"g","messages":[null,{"role":"user","content":null,"name":"x","tool_calls":null,"tool_call_id":"c"},{"Role":"user"}],"documents":[null,{"text":"t","doc_id":"7","score":-1.5e2,"title":"x"},{"doc_id":7,"score":null,"doc_id":8}]}`,
		`{"model":"g","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"documents":[{"text":"t\u00e9","doc_id":"7","score":-1.5e2,"title":"x"},null,{"doc_id":7,"score":null}]}`,
		`{"model":"g","messages":[{"role":"user","content":"a"}],"controls":{"citations":true,"hallucinations":false,"length":"short","originality":null,"x":[1]}}`,
		`{"model":"g","messages":[{"role":"user","content":"a"}],"controls":{"citations":null,"Length":"long","length":1}}`,
		`{"model":"g","messages":[{"role":"user","content":"a"}],"documents":[{"doc_id":1.5},{"score":1e999},{"score":"1"},{"doc_id":null,"text":null}]}`,
		`{"model":"g","messages":[],"model":"h", "x" : [ 1 , {"a":null} ] ,"Model":"i","\u006dodel":"j","\u00e9":1,"é":2}`,
	} {
		f.Add([]byte(s))
	}
	p := granite.New(granite.V33)
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, ok := scanFields(body); ok {
			var want map[string]json.RawMessage
			if err := json.Unmarshal(body, &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("scanFields: %q; encoding/json: %q, %v", got, want, err)
			}
		}
		req, err := pipeline.NewRequest(chatPath, body)
		if err != nil {
			return
		}
		fields, err := req.Fields()
		if err != nil {
			return
		}
		for _, raw := range []json.RawMessage{fields["messages"], fields["documents"], fields["controls"], body} {
			if got, ok := scanMessages(raw); ok {
				var want []wireMessage
				if err := json.Unmarshal(raw, &want); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("scanMessages: %+v; encoding/json: %+v, %v", got, want, err)
				}
			}
			if got, ok := scanControls(raw); ok {
				var want granite.Controls
				if err := json.Unmarshal(raw, &want); err != nil || !reflect.DeepEqual(*got, want) {
					t.Fatalf("scanControls: %+v; encoding/json: %+v, %v", got, want, err)
				}
			}
			if got, ok := scanDocuments(raw); ok {
				var want []granite.Document
				if err := json.Unmarshal(raw, &want); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("scanDocuments: %+v; encoding/json: %+v, %v", got, want, err)
				}
			}
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
		c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: p, in: in, max: 1 << 16, head: openaiwire.Chunk{Header: openaiwire.Header{ID: "x", Object: "chat.completion.chunk"}}}
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

// FuzzDecodeCompletion: what the stage reads of any upstream bytes as a whole answer (openaiwire's
// DecodeCompletionText, whose mirror is the stage's former struct: FuzzDecoders holds it to
// encoding/json, on these seeds too) is written back as the stage writes an answer (newAnswer),
// which must be json.Marshal's bytes for the stage's former structs. The bytes are also tried
// as a string's contents (text decodes it as encoding/json does).
func FuzzDecodeCompletion(f *testing.F) {
	for _, s := range []string{
		`{"id":"cmpl-1","object":"text_completion","created":1,"model":"granite","choices":[{"index":0,"text":"a \u003cco\u003e1\u003c/co\u003e.\n","logprobs":null,"finish_reason":"stop","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4,"prompt_tokens_details":null},"system_fingerprint":"fp","kv_transfer_params":null}`,
		` {"choices":[{"text":"x","finish_reason":null},null,{"text":null,"finish_reason":"length"}],"usage":null} `,
		`{"choices":[],"system_fingerprint":{"a":[1,-2.5e+3,true,false,null,"\ud83d\ude00 \ud800 \udc00x \u00e9 é \ufffd"]}}`,
		`{"choices":[{"text":"\"\\\/\b\f\n\r\t\u0000\u001f \ud83d\u0041"}]}`,
		`\"\\\/\b\f\n\r\t\u0000\u001f \ud83d\ude00 \ud800 \udc00x \ud83d\u0041 \uD83D\uDE00 é`,
		`{"choices":[{"text":"a"}],"choices":[{"text":"b","finish_reason":"stop"}]}`,
		`{"Choices":[{"TEXT":"a"}],"uſage":{"prompt_tokens":1},"ID":"x","mod\u0065l":"m"}`,
		`{"usage":{"prompt_tokens":7.0,"completion_tokens":1e3,"total_tokens":-0}}`,
		`{"usage":{"prompt_tokens":99999999999999999999}}`,
		"{\"choices\":[{\"text\":\"\xff\xc3 \xe2\x80\xa8 \xed\xa0\x80 ok\"}]}",
		"{\"choices\":[{\"text\":\"a\x1fb\"}]}", "\x1f\t",
		`{"choices":[{"text":1}]}`, `{"choices":{}}`, `[]`, `null`, `{"a":01}`, `{"a":"\x01"}`, `{"a":1,}`, `{"a" 1}`,
		`{"choices":[{"text":"a"}]} x`, `{"id":"\u12"}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":tru}`, `"\ud800\u"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got openaiwire.Completion
		werr := openaiwire.DecodeCompletionText(data, &got)

		if werr == nil { // the answer written back, as the stage writes it
			a := oldChatAnswer{oldHead: oldHead{ID: got.ID, Object: "chat.completion", Model: got.Model}, SystemFingerprint: got.SystemFingerprint}
			if u := got.Usage; u != nil {
				a.Usage = &oldUsage{u.PromptTokens, u.CompletionTokens, u.TotalTokens}
			}
			for i, ch := range got.Choices {
				cc := oldChatChoice{Index: i, Message: oldChatMessage{Role: "assistant", Content: &got.Choices[i].Text}, Logprobs: json.RawMessage("null")}
				if ch.FinishReason != nil {
					cc.FinishReason = *ch.FinishReason
					cc.Message.Citations = []granite.Citation{{CitationID: ch.Text, ContextText: got.Model}}
				}
				a.Choices = append(a.Choices, cc)
			}
			want, _ := json.Marshal(a)
			if out := newAnswer(&a).AppendJSON(nil, openaiwire.Options{FingerprintLast: true}); string(out) != string(want) {
				t.Fatalf("the answer written: %s, json.Marshal %s", out, want)
			}
		}

		// As a string's contents: text decodes a message's string content as encoding/json does.
		quoted := append(append([]byte{'"'}, data...), '"')
		var ws string
		jerr := json.Unmarshal(quoted, &ws)
		gs, gerr := text(quoted)
		if (gerr == nil) != (jerr == nil) || jerr == nil && gs != ws {
			t.Fatalf("text(%q) = %q, %v; encoding/json %q, %v", quoted, gs, gerr, ws, jerr)
		}
	})
}
