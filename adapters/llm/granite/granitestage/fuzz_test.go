package granitestage

import (
	"encoding/json"
	"errors"
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
