package disagg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
)

// FuzzPrefillAnswer: whatever a prefill endpoint answers, the stage never panics, and passes on
// transfer params only when the answer held a JSON object under kv_transfer_params; then the
// decode leg's body carries them unchanged.
func FuzzPrefillAnswer(f *testing.F) {
	f.Add(200, []byte(`{"id":"cmpl-1","choices":[{"text":"a"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[[1,2]],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":1}}`))
	f.Add(200, []byte(`{"kv_transfer_params":null}`))
	f.Add(200, []byte(`{"kv_transfer_params":[1]}`))
	f.Add(500, []byte(`{"error":{"message":"x"}}`))
	f.Add(400, []byte(`{"error":{"message":"bad"}}`))
	f.Add(200, []byte(`not json`))
	f.Fuzz(func(t *testing.T, status int, answer []byte) {
		s := New(Options{Model: "m", Prefill: []string{"p"}, Decode: []string{"d"}})
		var decodeBody []byte
		next := func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			if bytes.Contains(req.Body(), []byte(`"do_remote_decode":true`)) {
				return &pipeline.Response{StatusCode: status, Endpoint: "p", Body: pipeline.NewBody(answer, pipeline.Usage{})}, nil
			}
			decodeBody = append([]byte(nil), req.Body()...)
			return &pipeline.Response{StatusCode: http.StatusOK, Endpoint: "d", Body: pipeline.NewBody([]byte(`{}`), pipeline.Usage{})}, nil
		}
		req, err := pipeline.NewRequest("/v1/completions", []byte(`{"model":"m","prompt":"hello","max_tokens":5}`))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Interceptor()(next)(context.Background(), req)
		if err != nil {
			var e *pipeline.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T: %v", err, err)
			}
			return
		}
		res.Body.Finish(nil)
		var sent struct {
			Params json.RawMessage `json:"kv_transfer_params"`
		}
		if decodeBody == nil {
			return // the prefill's own 4xx answered
		}
		if err := json.Unmarshal(decodeBody, &sent); err != nil {
			t.Fatalf("the decode body is not JSON: %v", err)
		}
		var got struct {
			Params json.RawMessage `json:"kv_transfer_params"`
		}
		ok := status == 200 && json.Unmarshal(answer, &got) == nil && len(bytes.TrimSpace(got.Params)) > 0 && bytes.TrimSpace(got.Params)[0] == '{'
		switch {
		case ok && !jsonEqual(sent.Params, got.Params):
			t.Fatalf("params changed on the way: %s -> %s", got.Params, sent.Params)
		case !ok && len(sent.Params) > 0:
			t.Fatalf("params passed on from an answer without them: %s", sent.Params)
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && bytes.Equal(mustJSON(x), mustJSON(y))
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
