package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/infergate/infergate/core/pipeline"
)

// requireUser is a stage: it refuses a request whose body has no "user" member with the
// gateway's own 400 (every surface turns a *pipeline.Error into its protocol's error), and tags
// the ones it passes with a header for the upstream.
func requireUser(next pipeline.Handler) pipeline.Handler {
	return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		fields, err := req.Fields() // decoded once, only because this stage asks
		if err != nil {
			return nil, pipeline.InvalidJSON(err)
		}
		if _, ok := fields["user"]; !ok {
			return nil, pipeline.InvalidRequest("user", "missing_user", "this gateway requires a 'user' on every request")
		}
		if req.Header == nil {
			req.Header = http.Header{}
		}
		req.Header.Set("X-Checked-By", "requireUser")
		return next(ctx, req)
	}
}

// An interceptor wraps a Handler; Chain puts interceptors around the terminal handler (in the
// gateway, the metered exchange with an upstream; here, a stand-in that answers from memory).
func ExampleChain() {
	upstream := func(_ context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		body := fmt.Sprintf(`{"model":%q,"checked_by":%q}`, req.Model(), req.Header.Get("X-Checked-By"))
		return &pipeline.Response{StatusCode: http.StatusOK, Body: pipeline.NewBody([]byte(body), pipeline.Usage{Status: http.StatusOK})}, nil
	}
	h := pipeline.Chain(upstream, requireUser)

	for _, body := range []string{
		`{"model":"llama","user":"ada","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`,
	} {
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
		if err != nil {
			panic(err) // a 400 *pipeline.Error: malformed JSON, or no model
		}
		res, err := h(context.Background(), req)
		var refused *pipeline.Error
		if errors.As(err, &refused) {
			fmt.Println(refused.Status, string(refused.JSON()))
			continue
		}
		if err != nil {
			panic(err)
		}
		out, _ := io.ReadAll(res)
		res.Close() // finishes the body: an upstream's endpoint stops counting the request
		fmt.Println(res.StatusCode, string(out))
	}
	// Output:
	// 200 {"model":"llama","checked_by":"requireUser"}
	// 400 {"error":{"message":"this gateway requires a 'user' on every request","type":"invalid_request_error","param":"user","code":"missing_user"}}
}
