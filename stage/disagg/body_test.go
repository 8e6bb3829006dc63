package disagg

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/bodyref"
)

// TestLegBodies holds the bodies both legs send to what the stage sent before it edited the
// request's view: DropClientParams, then prefillBody and decodeLeg as EditBody and SetBody
// (internal/bodyref keeps that code), byte for byte, with the model renamed too.
func TestLegBodies(t *testing.T) {
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	require.NoError(t, err)
	seeds = append(seeds,
		[]byte(`{"model":"m","prompt":"p","kv_transfer_params":{"x":1},"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":9,"min_tokens":2}`),
		[]byte(`{"prompt":"kv_transfer_params","model":"m"}`))
	params := json.RawMessage(`{"do_remote_prefill":true,"remote_block_ids":[[1,2]]}`)
	for _, body := range seeds {
		req, err := pipeline.NewRequest("/v1/completions", body)
		if err != nil {
			continue
		}
		// The old stage's bodies.
		f0, err := bodyref.Fields(body)
		require.NoError(t, err)
		b1 := body
		if _, ok := f0["kv_transfer_params"]; ok && bytes.Contains(body, []byte("kv_transfer_params")) {
			b1, err = bodyref.EditBody(f0, nil, "kv_transfer_params")
			require.NoError(t, err)
		}
		f1, err := bodyref.Fields(b1)
		require.NoError(t, err)
		set := map[string]json.RawMessage{"kv_transfer_params": remoteDecode, "stream": json.RawMessage("false"), "max_tokens": json.RawMessage("1")}
		if _, ok := f1["max_completion_tokens"]; ok {
			set["max_completion_tokens"] = json.RawMessage("1")
		}
		wantPrefill, err := bodyref.EditBody(f1, set, "stream_options", "min_tokens", "min_completion_tokens")
		require.NoError(t, err)
		wantDecode, err := bodyref.EditBody(f1, map[string]json.RawMessage{"kv_transfer_params": params})
		require.NoError(t, err)

		var got [][]byte
		next := func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			got = append(got, r.Body(), r.BodyWithModel("up/m"))
			answer := []byte(`{}`)
			if len(got) == 2 {
				answer, _ = json.Marshal(map[string]json.RawMessage{"kv_transfer_params": params})
			}
			return &pipeline.Response{StatusCode: http.StatusOK, Endpoint: "e", Body: pipeline.NewBody(answer, pipeline.Usage{})}, nil
		}
		s := New(Options{Model: "m", Prefill: []string{"p"}, Decode: []string{"d"}})
		res, err := DropClientParams(s.Interceptor()(next))(context.Background(), req)
		require.NoError(t, err, "%s", body)
		res.Body.Finish(nil)
		require.Len(t, got, 4, "%s", body)
		for i, want := range [][]byte{wantPrefill, wantDecode} {
			ref, err := pipeline.NewRequest("/v1/completions", want)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got[2*i]), "leg %d of %s", i, body)
			require.Equal(t, string(ref.BodyWithModel("up/m")), string(got[2*i+1]), "leg %d of %s", i, body)
		}
		require.Equal(t, string(b1), string(req.Body()), "the client's request is the one DropClientParams left")
	}
}
