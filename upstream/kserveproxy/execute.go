package kserveproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Request parameter keys Triton interprets itself. The gateway has already applied them (or
// moved them into engines.Request); the ones that matter upstream are set again from the request.
const (
	paramSequenceID    = "sequence_id"
	paramSequenceStart = "sequence_start"
	paramSequenceEnd   = "sequence_end"
	paramEmptyFinal    = "triton_enable_empty_final_response"
	paramFinalResponse = "triton_final_response"
)

// consumed are the reserved parameters not forwarded as the client sent them: the sequence keys
// are rebuilt from req.Sequence, the timeout is already the call's deadline, and the empty-final
// flag is the gateway's to honour (it always asks the upstream for one).
var consumed = map[string]bool{paramSequenceID: true, paramSequenceStart: true, paramSequenceEnd: true,
	"timeout": true, paramEmptyFinal: true, "headers": true, "binary_data_output": true}

var paramTrue = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}

// execute is the model's ExecuteFunc: it picks an endpoint and forwards the validated request,
// failing over to the next endpoint on UNAVAILABLE (a connection failure or a server refusing
// work) as long as nothing was relayed to the client.
func (m *model) execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	routes := *m.routes.Load()
	seqID := req.Sequence.ID
	sequence := m.seq != nil && !seqID.IsZero()
	var (
		only *endpoint // the endpoint holding the request's sequence
		pin  *upstream.State
	)
	if sequence && !req.Sequence.Start {
		if only = m.seq.get(seqID); only != nil {
			pin = &only.State
		}
	}
	res := upstream.Failover(ctx, &m.p.router, routes, pin, func(ctx context.Context, r *route, ticket breaker.Ticket, _ bool) (bool, error) {
		if sequence && req.Sequence.Start {
			m.seq.set(seqID, r.ep)
		}
		relayed, err := m.attempt(ctx, r, req, send)
		ticket.Done(outcome(ctx, err))
		// A sequence's later requests have nowhere else to go: no other endpoint knows it.
		return !relayed && status.Code(err) == codes.Unavailable && only == nil, err
	})
	switch {
	case res.OK:
		if sequence && req.Sequence.End {
			m.seq.del(seqID)
		}
		return nil
	case res.Refused: // open or cooling down
		return passThrough(connect.NewError(connect.CodeUnavailable, res.Err))
	case res.Err != nil:
		return passThrough(res.Err)
	case only != nil:
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("upstream endpoint '%s', which holds sequence %s of model '%s', is not healthy", only.cfg.Name, seqID, m.public))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("no healthy upstream endpoint serves model '%s'", m.public))
}

// attempt forwards req to one endpoint and reports whether any response reached the client.
func (m *model) attempt(ctx context.Context, r *route, req *engines.Request, send func(*engines.Response) error) (relayed bool, err error) {
	ep := r.ep
	ep.AddOutstanding(1)
	r.inflight.Inc()
	start := time.Now()
	defer func() {
		ep.AddOutstanding(-1)
		r.inflight.Dec()
		r.latency.Observe(time.Since(start).Seconds())
		if err == nil {
			r.ok.Inc()
		} else {
			m.p.m.requests.WithLabelValues(m.public, ep.cfg.Name, codeLabel(err)).Inc()
		}
	}()
	wire := m.wireRequest(r.upstream, req)
	if m.decoupled {
		relayed, err = m.stream(ctx, ep, wire, send)
	} else {
		var res *inference.ModelInferResponse
		// The upstream call's span and traceparent, after the endpoint's own metadata.
		octx, span := tracing.StartUpstreamGRPC(ep.outgoing(ctx), ep.cfg.Name)
		res, err = ep.client.ModelInfer(octx, wire)
		tracing.End(span, err)
		if err == nil {
			var out *engines.Response
			if out, _, err = m.response(ep, res); err == nil {
				relayed = true
				if err = send(out); err != nil {
					err = &clientGone{err}
				}
			}
		}
	}
	if !relayed && ctx.Err() == nil && status.Code(err) == codes.Unavailable {
		ep.unavailable(err)
	}
	return relayed, err
}

// stream runs one request of a decoupled model as its own ModelStreamInfer call, relaying each
// response as it arrives. The call asks for Triton's empty final response, so the request's end
// is always marked, and for triton_grpc_error, so a failure keeps its gRPC code.
func (m *model) stream(ctx context.Context, ep *endpoint, wire *inference.ModelInferRequest, send func(*engines.Response) error) (relayed bool, err error) {
	// Returning cancels the call: after the final response nothing more is expected, and a
	// client that went away must not leave the upstream working for nobody.
	ctx, span := tracing.StartUpstreamGRPC(metadata.NewOutgoingContext(ctx, ep.streamM), ep.cfg.Name)
	defer func() { tracing.End(span, err) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ep.client.ModelStreamInfer(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(wire); err != nil {
		if errors.Is(err, io.EOF) {
			// The stream ended; its status comes with Recv.
			_, err = st.Recv()
		}
		return false, err
	}
	if err := st.CloseSend(); err != nil {
		return false, err
	}
	for {
		msg, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return relayed, nil // a server that ended the stream without marking a final
		}
		if err != nil {
			return relayed, err
		}
		if msg.GetErrorMessage() != "" {
			// A server that ignores triton_grpc_error reports failures in band, without a code.
			return relayed, connect.NewError(connect.CodeUnknown, errors.New(msg.GetErrorMessage()))
		}
		out, final, err := m.response(ep, msg.GetInferResponse())
		if err != nil {
			return relayed, err
		}
		if final && len(out.Outputs) == 0 {
			// The empty final we asked for: the gateway sends its own when its client asked.
			return relayed, nil
		}
		out.Final = final
		relayed = true
		if err := send(out); err != nil {
			return true, &clientGone{err}
		}
		if final {
			return true, nil
		}
	}
}

// clientGone is a failure to pass a response on to the gateway's own client: it says nothing
// of the upstream.
type clientGone struct{ err error }

func (e *clientGone) Error() string { return e.err.Error() }
func (e *clientGone) Unwrap() error { return e.err }

// outcome is what a forwarded request says of its endpoint's health.
func outcome(ctx context.Context, err error) breaker.Outcome {
	if err == nil {
		return breaker.Success
	}
	var gone *clientGone
	if ctx.Err() != nil || errors.As(err, &gone) {
		return breaker.Ignored // the client went away
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown, codes.DataLoss:
		return breaker.Failure
	case codes.ResourceExhausted:
		return breaker.Throttled
	case codes.Canceled:
		return breaker.Ignored
	}
	return breaker.Success // the endpoint answered: the request itself was at fault
}

// wireRequest is req as the upstream gets it: model renamed, tensors in raw form aliasing the
// request's bytes, sequence control inputs left to the upstream's own sequence batcher.
func (m *model) wireRequest(upstream string, req *engines.Request) *inference.ModelInferRequest {
	w := &inference.ModelInferRequest{ModelName: upstream, Id: req.ID, Parameters: m.parameters(req)}
	n := len(req.Inputs)
	inputs := make([]inference.ModelInferRequest_InferInputTensor, n)
	w.Inputs = make([]*inference.ModelInferRequest_InferInputTensor, 0, n)
	w.RawInputContents = make([][]byte, 0, n)
	for i := range req.Inputs {
		t := &req.Inputs[i]
		if m.controls[t.Name] {
			continue
		}
		in := &inputs[i]
		in.Name, in.Datatype, in.Shape = t.Name, tensor.Name(t.Datatype), t.Shape
		w.Inputs = append(w.Inputs, in)
		w.RawInputContents = append(w.RawInputContents, t.Data)
	}
	if len(req.Outputs) > 0 {
		outs := make([]inference.ModelInferRequest_InferRequestedOutputTensor, len(req.Outputs))
		w.Outputs = make([]*inference.ModelInferRequest_InferRequestedOutputTensor, len(req.Outputs))
		for i, name := range req.Outputs {
			outs[i].Name = name
			w.Outputs[i] = &outs[i]
		}
	}
	return w
}

// parameters are the request's own parameters minus the ones the gateway consumed, plus the
// sequence flags and, for a decoupled model, the request for an empty final response.
func (m *model) parameters(req *engines.Request) map[string]*inference.InferParameter {
	seq := req.Sequence
	if len(req.Parameters) == 0 && seq.ID.IsZero() && !m.decoupled {
		return nil
	}
	out := make(map[string]*inference.InferParameter, len(req.Parameters)+3)
	for k, v := range req.Parameters {
		if !consumed[k] {
			out[k] = v
		}
	}
	if !seq.ID.IsZero() {
		switch {
		case seq.ID.Text != "":
			out[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: seq.ID.Text}}
		case seq.ID.Uint <= math.MaxInt64:
			// int64 is what every Triton release accepts; uint64 only newer ones.
			out[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(seq.ID.Uint)}}
		default:
			out[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: seq.ID.Uint}}
		}
		if seq.Start {
			out[paramSequenceStart] = paramTrue
		}
		if seq.End {
			out[paramSequenceEnd] = paramTrue
		}
	}
	if m.decoupled {
		out[paramEmptyFinal] = paramTrue
	}
	return out
}

// response turns an upstream response into the model's: outputs in config order with their data
// in raw form (typed contents converted), and whether it was marked final.
func (m *model) response(ep *endpoint, res *inference.ModelInferResponse) (*engines.Response, bool, error) {
	outs, raw := res.GetOutputs(), res.GetRawOutputContents()
	bad := func(format string, args ...any) error {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("upstream '%s' answered model '%s' wrongly: %s", ep.cfg.Name, m.public, fmt.Sprintf(format, args...)))
	}
	if len(raw) > 0 && len(raw) != len(outs) {
		return nil, false, bad("%d raw_output_contents for %d outputs", len(raw), len(outs))
	}
	r := &engines.Response{Outputs: make([]engines.Tensor, len(outs))}
	sorted := true
	for i, o := range outs {
		t := &r.Outputs[i]
		t.Name, t.Shape = o.GetName(), o.GetShape()
		t.Datatype = tensor.ParseDatatype(o.GetDatatype())
		if !tensor.Valid(t.Datatype) {
			return nil, false, bad("output '%s' has datatype '%s'", t.Name, o.GetDatatype())
		}
		idx, ok := m.outIndex[t.Name]
		if !ok {
			return nil, false, bad("output '%s' is not in the model's config", t.Name)
		}
		if i > 0 && idx < m.outIndex[outs[i-1].GetName()] {
			sorted = false
		}
		switch {
		case len(raw) > 0 && o.GetContents() != nil:
			return nil, false, bad("output '%s' has both contents and raw_output_contents", t.Name)
		case len(raw) > 0:
			t.Data = raw[i]
		case o.GetContents() != nil:
			data, err := tensor.FromContents(t.Datatype, o.GetContents())
			if err != nil {
				return nil, false, bad("output '%s': %v", t.Name, err)
			}
			t.Data = data
		}
		// The upstream is not trusted to be consistent: whatever reads the outputs next (the
		// REST encoder, a client) relies on shape and bytes agreeing.
		n, ok := tensor.ElementCount(t.Shape)
		switch {
		case !ok:
			return nil, false, bad("output '%s' has shape %v", t.Name, t.Shape)
		case t.Datatype == inference.DataType_TYPE_STRING:
			if got, err := tensor.CountBytes(t.Data); err != nil || int64(got) != n {
				return nil, false, bad("output '%s' of shape %v does not hold %d framed BYTES elements", t.Name, t.Shape, n)
			}
		default:
			if size := int64(tensor.ElementSize(t.Datatype)); n > int64(len(t.Data))/size || n*size != int64(len(t.Data)) {
				return nil, false, bad("output '%s' of shape %v has %d bytes", t.Name, t.Shape, len(t.Data))
			}
		}
	}
	if !sorted {
		slices.SortStableFunc(r.Outputs, func(a, b engines.Tensor) int { return m.outIndex[a.Name] - m.outIndex[b.Name] })
	}
	final := false
	if params := res.GetParameters(); len(params) > 0 {
		if p, ok := params[paramFinalResponse]; ok {
			final = p.GetBoolParam()
			if len(params) > 1 {
				r.Parameters = make(map[string]*inference.InferParameter, len(params)-1)
				for k, v := range params {
					if k != paramFinalResponse {
						r.Parameters[k] = v
					}
				}
			}
		} else {
			r.Parameters = params
		}
	}
	return r, final, nil
}

// passThrough gives an upstream's gRPC status to the gateway as an error with the same code and
// message; other errors (the client's own cancellation, a bad upstream answer) stay as they are.
func passThrough(err error) error {
	var gone *clientGone
	if errors.As(err, &gone) {
		return gone.err
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.OK {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}

// codeLabel names an error's gRPC code the way connect does (unavailable, invalid_argument, ...).
func codeLabel(err error) string {
	if st, ok := status.FromError(err); ok {
		return connect.Code(st.Code()).String()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled.String()
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded.String()
	}
	return connect.CodeOf(err).String()
}
