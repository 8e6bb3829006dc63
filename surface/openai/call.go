package openai

import (
	"context"

	"github.com/infergate/infergate/core/pipeline"
)

// Call sends an OpenAI API request body (chat completion, completion or embedding) to POST path
// (/v1/chat/completions, ...) for the model the body names, through the same pipeline HTTP
// clients' requests take (the guard, the model's stages, routing, failover, metrics): the gRPC,
// Connect and KServe surfaces and batch workers use it to reach the same upstreams. The request
// carries the id pipeline.WithRequestID put in ctx, else a fresh one. Failures before an upstream
// answered are *pipeline.Error (an unknown model, a body without one, no healthy endpoint); an
// upstream's own error status comes back as a Response, with its body. Cancelling ctx cancels the
// upstream request. When ctx is a gRPC or Connect handler's, the call's X-Infergate-* metadata
// travels as an HTTP request's headers do (IncomingHeader): the stages read the same headers on
// every surface.
func (p *Proxy) Call(ctx context.Context, path string, body []byte) (*pipeline.Response, error) {
	req, err := pipeline.NewRequest(path, body)
	if err == nil {
		req.Header, err = IncomingHeader(ctx)
	}
	if err != nil {
		p.CountRejected(err.(*pipeline.Error).Status)
		return nil, err
	}
	req.ID = pipeline.RequestID(ctx)
	return p.Handle(ctx, req)
}
