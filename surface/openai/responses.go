package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// The Responses API's RPCs are served by the gateway's own /v1/responses routes, called
// in-process on the mux they are mounted on (surface/responses serves them): the RPC's message
// becomes the JSON body or query an HTTP client would send, and the answer's JSON is decoded
// into the RPC's message (protojson, as every other answer here). The caller's principal and
// deadline travel in the context; the RPC transport checked the key.

// httpAnswer is an in-process route's answer: its status and headers, its body held (bounded),
// or, for a 200 event stream, each event's data handed to onEvent as it comes.
type httpAnswer struct {
	h       http.Header
	status  int
	body    bytes.Buffer
	over    bool
	tap     *pipeline.EventTap
	onEvent func(data []byte) error
	err     error // onEvent's, or the tap's
}

func (a *httpAnswer) Header() http.Header { return a.h }
func (a *httpAnswer) Flush()              {}

func (a *httpAnswer) WriteHeader(status int) {
	if a.status != 0 || status < 200 {
		return
	}
	a.status = status
	if status == http.StatusOK && a.onEvent != nil && strings.HasPrefix(a.h.Get("Content-Type"), "text/event-stream") {
		a.tap = pipeline.NewEventTap(4<<20, a.onEvent)
	}
}

func (a *httpAnswer) Write(p []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	if a.err != nil {
		return 0, a.err
	}
	if a.tap != nil {
		a.tap.Write(p)
		if err := a.tap.Err(); err != nil {
			a.err = err
			return 0, err
		}
		return len(p), nil
	}
	limit := maxResponseBytes
	if a.status != http.StatusOK {
		limit = 64 << 10
	}
	if a.body.Len()+len(p) > limit {
		a.over = true
		return len(p), nil
	}
	return a.body.Write(p)
}

// route calls the mux's route in-process and returns its answer (an error status is the RPC's
// error).
func (s *service) route(ctx context.Context, method, target string, body []byte, onEvent func([]byte) error) (*httpAnswer, error) {
	if s.mux == nil {
		return nil, serverError(connect.CodeUnimplemented, "", "the Responses API is not served here")
	}
	if limit := s.p.opts.MaxBodyBytes; int64(len(body)) > limit {
		return nil, gatewayError(pipeline.TooLarge(limit))
	}
	r, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return nil, invalidArgument("response_id", "not a valid response id: "+err.Error())
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(HeaderRequestID, incomingRequestID(ctx))
	r.RequestURI = r.URL.RequestURI()
	a := &httpAnswer{h: make(http.Header), onEvent: onEvent}
	if httpapi.ServeInProcess(s.mux, a, r) && a.err == nil {
		a.err = errors.New("the answer was cut short")
	}
	switch {
	case a.status == 0:
		return nil, serverError(connect.CodeInternal, "", "the route gave no answer")
	case a.status != http.StatusOK:
		return nil, upstreamError(a.status, a.body.Bytes())
	case a.over:
		return nil, serverError(connect.CodeResourceExhausted, "response_too_large", fmt.Sprintf("the answer exceeds %d bytes", maxResponseBytes))
	}
	return a, nil
}

// unaryRoute calls a route and decodes its JSON answer into out.
func (s *service) unaryRoute(ctx context.Context, method, target string, body []byte, out proto.Message) error {
	a, err := s.route(ctx, method, target, body, nil)
	if err != nil {
		return err
	}
	if err := fromJSON.Unmarshal(a.body.Bytes(), out); err != nil {
		return serverError(connect.CodeInternal, "invalid_response", fmt.Sprintf("the answer is not the Responses API's JSON: %v", err))
	}
	return nil
}

func (s *service) createResponse(ctx context.Context, req *openaiv1.CreateResponseRequest) (*openaiv1.CreateResponseResponse, error) {
	body, err := responsesBody(req, false)
	if err != nil {
		return nil, err
	}
	out := &openaiv1.CreateResponseResponse{Response: new(openaiv1.ResponseObject)}
	if err := s.unaryRoute(ctx, http.MethodPost, "/v1/responses", body, out.Response); err != nil {
		return nil, err
	}
	return out, nil
}

// streamResponse sends each event of the route's stream as one message. An error event ends
// the call with its error; a stream that ends without a terminal event, UNAVAILABLE.
func (s *service) streamResponse(ctx context.Context, req *openaiv1.StreamResponseRequest, send func(*openaiv1.StreamResponseResponse) error) error {
	if req.GetRequest() == nil {
		return invalidArgument("request", "request is required")
	}
	body, err := responsesBody(req.GetRequest(), true)
	if err != nil {
		return err
	}
	ended := false
	var failed error
	msg := new(openaiv1.StreamResponseResponse)
	a, err := s.route(ctx, http.MethodPost, "/v1/responses", body, func(data []byte) error {
		if e := eventError(data); e != nil {
			failed = e
			return e
		}
		proto.Reset(msg)
		if err := fromJSON.Unmarshal(data, msg); err != nil {
			failed = serverError(connect.CodeInternal, "invalid_response", fmt.Sprintf("an event is not the Responses API's JSON: %v", err))
			return failed
		}
		switch msg.GetType() {
		case "response.completed", "response.incomplete", "response.failed":
			ended = true
		}
		if err := send(msg); err != nil {
			failed = err
			return err
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case failed != nil:
		if ctx.Err() != nil {
			return fromContext(ctx, failed)
		}
		return failed
	case !ended || a.err != nil:
		return serverError(connect.CodeUnavailable, "upstream_stream_error", "the stream ended before the response did")
	}
	return nil
}

func responsePath(id, sub string) (string, error) {
	if id == "" {
		return "", invalidArgument("response_id", "response_id is required")
	}
	p := "/v1/responses/" + url.PathEscape(id)
	if sub != "" {
		p += "/" + sub
	}
	return p, nil
}

func (s *service) getResponse(ctx context.Context, req *openaiv1.GetResponseRequest) (*openaiv1.GetResponseResponse, error) {
	p, err := responsePath(req.GetResponseId(), "")
	if err != nil {
		return nil, err
	}
	out := &openaiv1.GetResponseResponse{Response: new(openaiv1.ResponseObject)}
	if err := s.unaryRoute(ctx, http.MethodGet, p, nil, out.Response); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) deleteResponse(ctx context.Context, req *openaiv1.DeleteResponseRequest) (*openaiv1.DeleteResponseResponse, error) {
	p, err := responsePath(req.GetResponseId(), "")
	if err != nil {
		return nil, err
	}
	out := new(openaiv1.DeleteResponseResponse)
	if err := s.unaryRoute(ctx, http.MethodDelete, p, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *service) listInputItems(ctx context.Context, req *openaiv1.ListInputItemsRequest) (*openaiv1.ListInputItemsResponse, error) {
	p, err := responsePath(req.GetResponseId(), "input_items")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if req.GetLimit() != 0 {
		q.Set("limit", strconv.Itoa(int(req.GetLimit())))
	}
	if req.GetOrder() != "" {
		q.Set("order", req.GetOrder())
	}
	if req.GetAfter() != "" {
		q.Set("after", req.GetAfter())
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	out := new(openaiv1.ListInputItemsResponse)
	if err := s.unaryRoute(ctx, http.MethodGet, p, nil, out); err != nil {
		return nil, err
	}
	return out, nil
}

func (h connectHandler) CreateResponse(ctx context.Context, req *openaiv1.CreateResponseRequest) (*openaiv1.CreateResponseResponse, error) {
	res, err := h.s.createResponse(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) StreamResponse(ctx context.Context, req *openaiv1.StreamResponseRequest, st *connect.ServerStream[openaiv1.StreamResponseResponse]) error {
	return connectError(h.s.streamResponse(ctx, req, st.Send))
}

func (h connectHandler) GetResponse(ctx context.Context, req *openaiv1.GetResponseRequest) (*openaiv1.GetResponseResponse, error) {
	res, err := h.s.getResponse(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) DeleteResponse(ctx context.Context, req *openaiv1.DeleteResponseRequest) (*openaiv1.DeleteResponseResponse, error) {
	res, err := h.s.deleteResponse(ctx, req)
	return res, connectError(err)
}

func (h connectHandler) ListInputItems(ctx context.Context, req *openaiv1.ListInputItemsRequest) (*openaiv1.ListInputItemsResponse, error) {
	res, err := h.s.listInputItems(ctx, req)
	return res, connectError(err)
}

func (g grpcServer) CreateResponse(ctx context.Context, req *openaiv1.CreateResponseRequest) (*openaiv1.CreateResponseResponse, error) {
	return g.s.createResponse(ctx, req)
}

func (g grpcServer) StreamResponse(req *openaiv1.StreamResponseRequest, st grpc.ServerStreamingServer[openaiv1.StreamResponseResponse]) error {
	return g.s.streamResponse(st.Context(), req, st.Send)
}

func (g grpcServer) GetResponse(ctx context.Context, req *openaiv1.GetResponseRequest) (*openaiv1.GetResponseResponse, error) {
	return g.s.getResponse(ctx, req)
}

func (g grpcServer) DeleteResponse(ctx context.Context, req *openaiv1.DeleteResponseRequest) (*openaiv1.DeleteResponseResponse, error) {
	return g.s.deleteResponse(ctx, req)
}

func (g grpcServer) ListInputItems(ctx context.Context, req *openaiv1.ListInputItemsRequest) (*openaiv1.ListInputItemsResponse, error) {
	return g.s.listInputItems(ctx, req)
}
