package kserve

import (
	"cmp"
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"go.opentelemetry.io/otel/trace"
)

// finalParams are the shared, read-only response parameters marking a stream response final or not.
var (
	finalTrue  = map[string]*inference.InferParameter{paramFinalResponse: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
	finalFalse = map[string]*inference.InferParameter{paramFinalResponse: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: false}}}
)

func finalParams(final bool, model map[string]*inference.InferParameter) map[string]*inference.InferParameter {
	shared := finalFalse
	if final {
		shared = finalTrue
	}
	if len(model) == 0 {
		return shared
	}
	out := make(map[string]*inference.InferParameter, len(model)+1)
	for k, v := range model {
		out[k] = v
	}
	out[paramFinalResponse] = shared[paramFinalResponse]
	return out
}

// maxDecoupledInFlight is how many decoupled requests one stream may have running; past it the
// stream stops reading, so HTTP/2 flow control pushes back on the client.
const maxDecoupledInFlight = 128

// inferStream is one ModelStreamInfer call as either transport presents it.
type inferStream interface {
	Receive() (*inference.ModelInferRequest, error)
	Send(*inference.ModelStreamInferResponse) error
}

// streamSession is one ModelStreamInfer call. Requests for non-decoupled models run in the receive
// loop, so their responses leave in request order; decoupled requests (to decoupled models, or
// asking an engines.RequestDecoupler to stream) run concurrently and their responses interleave,
// told apart by id.
type streamSession struct {
	svc      *Service
	stream   inferStream
	failFast bool
	cancel   context.CancelCauseFunc
	wg       sync.WaitGroup
	slots    chan struct{} // bounds the decoupled requests running at once

	mu    sync.Mutex // serialises Send and guards fatal
	fatal error      // first error, in fail-fast mode
}

// ModelStreamInfer is Triton's bidirectional streaming inference, for the connect transport.
func (s *Service) ModelStreamInfer(ctx context.Context, stream *connect.BidiStream[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	return s.serveStream(ctx, stream, stream.RequestHeader().Get(engines.GRPCErrorHeader) == "true")
}

// serveStream runs one stream until the client half-closes it (or, in fail-fast mode, the first
// error).
func (s *Service) serveStream(ctx context.Context, stream inferStream, failFast bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ss := &streamSession{svc: s, stream: stream, cancel: cancel, failFast: failFast,
		slots: make(chan struct{}, maxDecoupledInFlight)}
	recv := stream.Receive
	if ss.failFast {
		// A failing decoupled request must end the stream even while the loop waits for the
		// client, so receive on a separate goroutine that the loop can abandon.
		recv = receiver(ctx, stream)
	}
	for {
		req, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			cancel(err)
			ss.wg.Wait()
			return ss.result(err)
		}
		if err := ss.handle(ctx, req); err != nil {
			cancel(err)
			ss.wg.Wait()
			return ss.result(err)
		}
	}
	ss.wg.Wait()
	return ss.result(nil)
}

func receiver(ctx context.Context, stream inferStream) func() (*inference.ModelInferRequest, error) {
	type result struct {
		req *inference.ModelInferRequest
		err error
	}
	ch := make(chan result)
	go func() {
		for {
			req, err := stream.Receive()
			select {
			case ch <- result{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return func() (*inference.ModelInferRequest, error) {
		select {
		case r := <-ch:
			return r.req, r.err
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// result is what the handler returns: the fail-fast error if one happened, else err.
func (ss *streamSession) result(err error) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.fatal != nil {
		return ss.fatal
	}
	if err != nil && errors.Is(err, context.Canceled) {
		return asStatus(err)
	}
	return err
}

func (ss *streamSession) send(m *inference.ModelStreamInferResponse) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.fatal != nil {
		return ss.fatal
	}
	return ss.stream.Send(m)
}

// report delivers a request's error: as an error_message response, or in fail-fast mode by ending
// the stream. A non-nil result means the stream must end.
func (ss *streamSession) report(id string, err error) error {
	st := asStatus(err)
	if ss.failFast {
		ss.mu.Lock()
		if ss.fatal == nil {
			ss.fatal = st
		}
		ss.mu.Unlock()
		ss.cancel(st)
		return st
	}
	return ss.send(&inference.ModelStreamInferResponse{
		ErrorMessage:  st.Message(),
		InferResponse: &inference.ModelInferResponse{Id: id},
	})
}

// handle processes one request from the stream, in a span of its own when it is traced (as
// Triton traces each request of a stream), which ends with its last response.
func (ss *streamSession) handle(ctx context.Context, req *inference.ModelInferRequest) error {
	start := time.Now()
	rctx, span := ss.svc.tracer.StreamRequest(ctx, req.GetModelName(), req.GetId())
	decoupled, failed, err := ss.serve(ctx, rctx, span, req, start)
	if !decoupled {
		tracing.End(span, cmp.Or(failed, err))
	}
	return err
}

// serve is handle under the request's span: rctx carries it to the model (and its upstream
// calls), ctx is the stream's. It returns what failed the request (reported to the client
// already) and what must end the stream. A decoupled request runs on, and ends the span itself.
func (ss *streamSession) serve(ctx, rctx context.Context, span trace.Span, req *inference.ModelInferRequest, start time.Time) (decoupled bool, failed, err error) {
	fail := func(id string, err error) (bool, error, error) { return false, err, ss.report(id, err) }
	if !ss.svc.Ready() {
		return fail(req.GetId(), connect.NewError(connect.CodeUnavailable, errors.New("Server is stopping")))
	}
	e, err := ss.svc.reg.ResolveFor(rctx, req.GetModelName(), req.GetModelVersion())
	if err != nil {
		return fail(req.GetId(), err)
	}
	r, opts, err := prepare(e, req, ss.svc.shmScope(ctx))
	if err != nil {
		e.Stats.RecordFailure(start, time.Now())
		return fail(req.GetId(), err)
	}
	if e.RequestDecoupled(r) {
		select {
		case ss.slots <- struct{}{}:
		case <-ctx.Done():
			opts.releaseShm()
			return false, nil, context.Cause(ctx)
		}
		ss.wg.Add(1)
		go func() {
			defer func() { <-ss.slots; ss.wg.Done() }()
			defer opts.releaseShm()
			tracing.End(span, ss.runDecoupled(rctx, e, r, opts, start))
		}()
		return true, nil, nil
	}
	out, err := inferOnce(rctx, e, r, opts, start)
	opts.releaseShm()
	if err != nil {
		return fail(r.ID, err)
	}
	out.Parameters = finalParams(true, out.Parameters)
	return false, nil, ss.send(&inference.ModelStreamInferResponse{InferResponse: out})
}

// runDecoupled streams a decoupled model's responses, each marked final or not, and ends with an
// empty final response when the request asked for one and the model's last response was not
// final. It returns the request's error, reported already.
func (ss *streamSession) runDecoupled(ctx context.Context, e *engines.Entry, r *engines.Request, opts callOptions, start time.Time) error {
	timing := engines.Timing{Start: start}
	inferStart := time.Now()
	timing.Input = inferStart.Sub(start)
	sentFinal := false
	err := execute(ctx, e, r, opts, func(res *engines.Response) error {
		out, err := encode(e, r, res, opts)
		if err != nil {
			return err
		}
		out.Parameters = finalParams(res.Final, res.Parameters)
		sentFinal = res.Final
		return ss.send(&inference.ModelStreamInferResponse{InferResponse: out})
	})
	timing.Infer = time.Since(inferStart)
	if err == nil && !sentFinal && opts.emptyFinal {
		err = ss.send(&inference.ModelStreamInferResponse{InferResponse: &inference.ModelInferResponse{
			ModelName: e.Name(), ModelVersion: e.Version(), Id: r.ID, Parameters: finalTrue,
		}})
	}
	if err != nil {
		e.Stats.RecordFailure(start, time.Now())
		if ctx.Err() == nil {
			_ = ss.report(r.ID, err)
		}
		return err
	}
	e.Stats.RecordSuccess(1, timing, time.Now())
	return nil
}
