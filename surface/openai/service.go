package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// service serves infergate.openai.v1.OpenAIService through Call: every request becomes the JSON
// body an HTTP client would send (convert.go), so it gets the same routing, failover and metrics,
// and every response or chunk is decoded into its message. Tokenize and Detokenize become vLLM's
// /tokenize and /detokenize bodies in the same way, answered by Options.Tokens.
//
// Responses are decoded with protojson: the messages' field names are OpenAI's keys, so it reads
// OpenAI's JSON as is (nulls included) and drops what the messages do not have (vLLM's stop_reason,
// prompt_logprobs, ...). It reflects over the message, which costs a few microseconds a chunk; a
// hand-written decoder would save that at the price of a second copy of every message's schema.
type service struct {
	p   *Proxy
	mux *http.ServeMux // the routes mounted with it: the Responses RPCs call its /v1/responses
}

// maxResponseBytes bounds a unary response body read into memory (large embedding batches reach
// tens of MiB).
const maxResponseBytes = 512 << 20

var fromJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

func (s *service) mount(mux *http.ServeMux, grpcSrv grpc.ServiceRegistrar) {
	s.mux = mux
	mux.Handle(openaiv1connect.NewOpenAIServiceHandler(connectHandler{s}, connect.WithReadMaxBytes(int(s.p.opts.MaxBodyBytes))))
	if grpcSrv != nil {
		openaiv1.RegisterOpenAIServiceServer(grpcSrv, grpcServer{s})
	}
}

func (s *service) listModels(ctx context.Context) *openaiv1.ListModelsResponse {
	out := &openaiv1.ListModelsResponse{Object: "list"}
	for _, mr := range s.p.Routes(ctx) {
		e, ok := HealthyEntry(mr.Routes, "")
		if !ok {
			continue
		}
		m := new(openaiv1.Model)
		if fromJSON.Unmarshal(e, m) != nil {
			m = &openaiv1.Model{Object: "model"} // an entry of unexpected shape: its name at least
		}
		m.Id = mr.Name
		out.Data = append(out.Data, m)
	}
	return out
}

func (s *service) chat(ctx context.Context, req *openaiv1.CreateChatCompletionRequest) (*openaiv1.CreateChatCompletionResponse, error) {
	body, err := chatBody(req, false)
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.CreateChatCompletionResponse)
	if err := s.unary(ctx, "/v1/chat/completions", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) streamChat(ctx context.Context, req *openaiv1.StreamChatCompletionRequest, send func(*openaiv1.StreamChatCompletionResponse) error) error {
	if req.GetRequest() == nil {
		return invalidArgument("request", "request is required")
	}
	body, err := chatBody(req.GetRequest(), true)
	if err != nil {
		return err
	}
	return stream(ctx, s, "/v1/chat/completions", body, new(openaiv1.StreamChatCompletionResponse), func(c *openaiv1.StreamChatCompletionResponse) bool {
		for _, ch := range c.GetChoices() {
			if ch.GetFinishReason() != "" {
				return true
			}
		}
		return false
	}, send)
}

func (s *service) completion(ctx context.Context, req *openaiv1.CreateCompletionRequest) (*openaiv1.CreateCompletionResponse, error) {
	body, err := completionBody(req, false)
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.CreateCompletionResponse)
	if err := s.unary(ctx, "/v1/completions", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) streamCompletion(ctx context.Context, req *openaiv1.StreamCompletionRequest, send func(*openaiv1.StreamCompletionResponse) error) error {
	if req.GetRequest() == nil {
		return invalidArgument("request", "request is required")
	}
	body, err := completionBody(req.GetRequest(), true)
	if err != nil {
		return err
	}
	return stream(ctx, s, "/v1/completions", body, new(openaiv1.StreamCompletionResponse), func(c *openaiv1.StreamCompletionResponse) bool {
		for _, ch := range c.GetChoices() {
			if ch.GetFinishReason() != "" {
				return true
			}
		}
		return false
	}, send)
}

func (s *service) embedding(ctx context.Context, req *openaiv1.CreateEmbeddingRequest) (*openaiv1.CreateEmbeddingResponse, error) {
	body, err := embeddingBody(req)
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.CreateEmbeddingResponse)
	if err := s.unary(ctx, "/v1/embeddings", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) tokenize(ctx context.Context, req *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
	body, err := tokenizeBody(req)
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.TokenizeResponse)
	if err := s.tokens(ctx, "/tokenize", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) detokenize(ctx context.Context, req *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	body, err := detokenizeBody(req)
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.DetokenizeResponse)
	if err := s.tokens(ctx, "/detokenize", body, out); err != nil {
		return nil, err
	}
	return out, nil
}

// tokens answers a Tokenize or Detokenize call with Options.Tokens, the code that serves the
// HTTP endpoint at path, and decodes its answer into out.
func (s *service) tokens(ctx context.Context, path string, body []byte, out proto.Message) error {
	if s.p.opts.Tokens == nil {
		return serverError(connect.CodeUnimplemented, "", "this gateway does not serve "+path)
	}
	status, answer, perr := s.p.opts.Tokens(ctx, path, body)
	switch {
	case ctx.Err() != nil:
		return fromContext(ctx, ctx.Err())
	case perr != nil:
		return fromGatewayError(ctx, perr)
	case status != http.StatusOK: // a forwarded request's upstream said no
		return upstreamError(status, answer)
	}
	if err := fromJSON.Unmarshal(answer, out); err != nil {
		return serverError(connect.CodeInternal, "invalid_upstream_response", fmt.Sprintf("the %s answer is not vLLM's JSON: %v", path, err))
	}
	return nil
}

// call sends body and returns the upstream's successful response; any other outcome is an
// *rpcError. The caller closes the response.
func (s *service) call(ctx context.Context, path string, body []byte) (*pipeline.Response, error) {
	if limit := s.p.opts.MaxBodyBytes; int64(len(body)) > limit {
		return nil, gatewayError(pipeline.TooLarge(limit))
	}
	reqID := incomingRequestID(ctx)
	res, err := s.p.Call(pipeline.WithRequestID(ctx, reqID), path, body)
	if err != nil {
		return nil, fromGatewayError(ctx, err)
	}
	setResponseHeaders(ctx, reqID, res)
	if res.StatusCode != http.StatusOK {
		defer res.Close()
		b, _ := io.ReadAll(io.LimitReader(res, 64<<10))
		return nil, upstreamError(res.StatusCode, b)
	}
	return res, nil
}

// unary calls path and decodes the whole response into out.
func (s *service) unary(ctx context.Context, path string, body []byte, out proto.Message) error {
	res, err := s.call(ctx, path, body)
	if err != nil {
		return err
	}
	defer res.Close()
	b, err := io.ReadAll(io.LimitReader(res, maxResponseBytes+1))
	if err != nil {
		return readFailed(ctx, res, err)
	}
	if len(b) > maxResponseBytes {
		return serverError(connect.CodeResourceExhausted, "response_too_large",
			fmt.Sprintf("upstream %s's response exceeds %d bytes", res.Endpoint, maxResponseBytes))
	}
	if err := fromJSON.Unmarshal(b, out); err != nil {
		return serverError(connect.CodeInternal, "invalid_upstream_response",
			fmt.Sprintf("upstream %s's response is not OpenAI's JSON: %v", res.Endpoint, err))
	}
	return nil
}

// stream calls path with a streaming body and sends each event as one message, as it arrives.
// msg is decoded into afresh for every event (send serializes it before returning). The stream
// ends cleanly only at OpenAI's [DONE] or, for servers that omit it, at the body's end after a
// finish reason; a cut body, an error event or bad JSON ends it with an error.
func stream[T proto.Message](ctx context.Context, s *service, path string, body []byte, msg T, finished func(T) bool, send func(T) error) error {
	res, err := s.call(ctx, path, body)
	if err != nil {
		return err
	}
	defer res.Close()
	ev := pipeline.NewEvents(res)
	sawFinish := false
	for {
		data, err := ev.Next()
		switch {
		case err == io.EOF && ev.Done():
			return nil // the stream's logical end; the exchange counts it complete

		case err == io.EOF && sawFinish:
			return nil
		case err == io.EOF:
			return serverError(connect.CodeUnavailable, "upstream_stream_error",
				fmt.Sprintf("upstream %s ended the stream before it finished", res.Endpoint))
		case err != nil:
			return readFailed(ctx, res, err)
		}
		if e := eventError(data); e != nil {
			return e
		}
		if err := fromJSON.Unmarshal(data, msg); err != nil {
			return serverError(connect.CodeInternal, "invalid_upstream_response",
				fmt.Sprintf("upstream %s sent a chunk that is not OpenAI's JSON: %v", res.Endpoint, err))
		}
		sawFinish = sawFinish || finished(msg)
		if err := send(msg); err != nil {
			// The client's failure, for the stages that keep what went through (a session turn
			// must not keep an answer its client never got); the deferred Close then does nothing.
			res.Body.Finish(err)
			if ctx.Err() != nil {
				return fromContext(ctx, err)
			}
			return err
		}
	}
}

// readFailed is the error of a response body that could not be read to its end.
func readFailed(ctx context.Context, res *pipeline.Response, err error) *rpcError {
	if ctx.Err() != nil {
		return fromContext(ctx, err)
	}
	return serverError(connect.CodeUnavailable, "upstream_stream_error",
		fmt.Sprintf("upstream %s failed mid-response: %v", res.Endpoint, err))
}

// incomingRequestID is the caller's X-Request-Id, or a new one.
func incomingRequestID(ctx context.Context) string {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		if id := ci.RequestHeader().Get(HeaderRequestID); id != "" {
			return id
		}
	} else if v := metadata.ValueFromIncomingContext(ctx, "x-request-id"); len(v) > 0 && v[0] != "" {
		return v[0]
	}
	return pipeline.NewRequestID()
}

// connectHandler serves the service to Connect and gRPC-Web clients (and gRPC clients that reach
// net/http), converting errors for connect-go.
type connectHandler struct{ s *service }

func (h connectHandler) ListModels(ctx context.Context, _ *openaiv1.ListModelsRequest) (*openaiv1.ListModelsResponse, error) {
	return h.s.listModels(ctx), nil
}

func (h connectHandler) CreateChatCompletion(ctx context.Context, req *openaiv1.CreateChatCompletionRequest) (*openaiv1.CreateChatCompletionResponse, error) {
	res, err := h.s.chat(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) StreamChatCompletion(ctx context.Context, req *openaiv1.StreamChatCompletionRequest, st *connect.ServerStream[openaiv1.StreamChatCompletionResponse]) error {
	return connectError(h.s.streamChat(ctx, req, st.Send))
}

func (h connectHandler) CreateCompletion(ctx context.Context, req *openaiv1.CreateCompletionRequest) (*openaiv1.CreateCompletionResponse, error) {
	res, err := h.s.completion(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) StreamCompletion(ctx context.Context, req *openaiv1.StreamCompletionRequest, st *connect.ServerStream[openaiv1.StreamCompletionResponse]) error {
	return connectError(h.s.streamCompletion(ctx, req, st.Send))
}

func (h connectHandler) CreateEmbedding(ctx context.Context, req *openaiv1.CreateEmbeddingRequest) (*openaiv1.CreateEmbeddingResponse, error) {
	res, err := h.s.embedding(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) Tokenize(ctx context.Context, req *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
	res, err := h.s.tokenize(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) Detokenize(ctx context.Context, req *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	res, err := h.s.detokenize(ctx, req)
	return res, connectError(err)
}

// grpcServer serves the service to gRPC clients on grpc-go's transport; grpc-go reads the status
// of an *rpcError through its GRPCStatus method.
type grpcServer struct{ s *service }

func (g grpcServer) ListModels(ctx context.Context, _ *openaiv1.ListModelsRequest) (*openaiv1.ListModelsResponse, error) {
	return g.s.listModels(ctx), nil
}

func (g grpcServer) CreateChatCompletion(ctx context.Context, req *openaiv1.CreateChatCompletionRequest) (*openaiv1.CreateChatCompletionResponse, error) {
	return g.s.chat(ctx, req)
}

func (g grpcServer) StreamChatCompletion(req *openaiv1.StreamChatCompletionRequest, st grpc.ServerStreamingServer[openaiv1.StreamChatCompletionResponse]) error {
	return g.s.streamChat(st.Context(), req, st.Send)
}

func (g grpcServer) CreateCompletion(ctx context.Context, req *openaiv1.CreateCompletionRequest) (*openaiv1.CreateCompletionResponse, error) {
	return g.s.completion(ctx, req)
}

func (g grpcServer) StreamCompletion(req *openaiv1.StreamCompletionRequest, st grpc.ServerStreamingServer[openaiv1.StreamCompletionResponse]) error {
	return g.s.streamCompletion(st.Context(), req, st.Send)
}

func (g grpcServer) CreateEmbedding(ctx context.Context, req *openaiv1.CreateEmbeddingRequest) (*openaiv1.CreateEmbeddingResponse, error) {
	return g.s.embedding(ctx, req)
}

func (g grpcServer) Tokenize(ctx context.Context, req *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
	return g.s.tokenize(ctx, req)
}

func (g grpcServer) Detokenize(ctx context.Context, req *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	return g.s.detokenize(ctx, req)
}
