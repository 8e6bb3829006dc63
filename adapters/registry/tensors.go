package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// RemoteTensors serves registered tensor models from an engines.Registry: each is an
// engines.RemoteModel whose requests are forwarded to the backend's KServe gRPC server
// (ModelInfer, or ModelStreamInfer for decoupled models), so RepositoryIndex, ModelMetadata,
// ModelConfig and ModelInfer show it like any model.
//
// A model name is served by one lease at a time: the first registered. Other leases for the same
// name wait; when the serving lease ends the next takes over. A name the registry already serves
// otherwise (a built-in) is not taken over. Requests in flight on a lease that ends fail.
type RemoteTensors struct {
	reg *engines.Registry
	log *slog.Logger

	mu      sync.Mutex
	leases  map[string]*tensorLease
	byModel map[string][]*tensorLease // registration order
}

type tensorLease struct {
	TensorBackend
	conn  *grpc.ClientConn // while serving
	entry *engines.Entry   // while serving
}

// NewRemoteTensors serves registered tensor models from reg.
func NewRemoteTensors(reg *engines.Registry, log *slog.Logger) *RemoteTensors {
	if log == nil {
		log = slog.Default()
	}
	return &RemoteTensors{reg: reg, log: log, leases: map[string]*tensorLease{}, byModel: map[string][]*tensorLease{}}
}

// Add implements TensorBackends. It fails when the lease's model would be served but cannot be
// (a bad config, a name the registry already has).
func (r *RemoteTensors) Add(b TensorBackend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.leases[b.LeaseID]; ok {
		return fmt.Errorf("registry: lease %s is already added", b.LeaseID)
	}
	l := &tensorLease{TensorBackend: b}
	queue := r.byModel[b.Model]
	if slices.ContainsFunc(queue, func(x *tensorLease) bool { return x.entry != nil }) {
		r.leases[b.LeaseID] = l
		r.byModel[b.Model] = append(queue, l)
		return nil // waits for the serving lease to end
	}
	if err := r.serve(l); err != nil {
		return err
	}
	r.leases[b.LeaseID] = l
	r.byModel[b.Model] = append(queue, l)
	return nil
}

// Remove implements TensorBackends.
func (r *RemoteTensors) Remove(leaseID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leases[leaseID]
	if l == nil {
		return
	}
	delete(r.leases, leaseID)
	queue := slices.DeleteFunc(r.byModel[l.Model], func(x *tensorLease) bool { return x == l })
	if len(queue) == 0 {
		delete(r.byModel, l.Model)
	} else {
		r.byModel[l.Model] = queue
	}
	if l.entry == nil {
		return
	}
	r.stop(l)
	for _, next := range queue {
		if err := r.serve(next); err != nil {
			r.log.Warn("registry: cannot serve registered tensor model from the next lease", "model", next.Model, "lease", next.LeaseID, "err", err)
			continue
		}
		r.log.Info("registry: tensor model now served by another lease", "model", next.Model, "lease", next.LeaseID, "url", next.URL)
		return
	}
}

// Close stops serving every registered model.
func (r *RemoteTensors) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.leases {
		if l.entry != nil {
			r.stop(l)
		}
	}
	r.leases = map[string]*tensorLease{}
	r.byModel = map[string][]*tensorLease{}
}

// serve registers l's model; the caller holds mu.
func (r *RemoteTensors) serve(l *tensorLease) error {
	conn, err := dialKServe(l.URL)
	if err != nil {
		return err
	}
	f := &forwarder{client: inference.NewGRPCInferenceServiceClient(conn), model: l.Model}
	m, err := engines.NewRemoteModel(l.Config, f.execute)
	if err != nil {
		conn.Close()
		return err
	}
	f.configure(m.Config())
	entry, err := r.reg.Register(m)
	if err != nil {
		conn.Close()
		return err
	}
	l.conn, l.entry = conn, entry
	return nil
}

// stop unregisters l's model, if the registry still holds the one l registered; the caller holds mu.
func (r *RemoteTensors) stop(l *tensorLease) {
	if r.reg.Lookup(l.Model) == l.entry {
		r.reg.Remove(l.Model)
	}
	l.conn.Close()
	l.conn, l.entry = nil, nil
}

// maxMessageBytes is the largest message forwarded either way, as the gateway's own limit.
const maxMessageBytes = math.MaxInt32

// dialKServe makes a (lazily connecting) client of a backend's KServe gRPC server.
func dialKServe(raw string) (*grpc.ClientConn, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("registry: backend url: %w", err)
	}
	creds := insecure.NewCredentials()
	port := "80"
	if u.Scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
		port = "443"
	}
	if u.Port() != "" {
		port = u.Port()
	}
	conn, err := grpc.NewClient(net.JoinHostPort(u.Hostname(), port), grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)))
	if err != nil {
		return nil, fmt.Errorf("registry: backend %s: %w", raw, err)
	}
	return conn, nil
}

// Triton's request parameters for sequences and decoupled responses.
const (
	paramSequenceID    = "sequence_id"
	paramSequenceStart = "sequence_start"
	paramSequenceEnd   = "sequence_end"
	paramEmptyFinal    = "triton_enable_empty_final_response"
	paramFinalResponse = "triton_final_response"
)

// forwarder runs a remote model's requests on its backend.
type forwarder struct {
	client    inference.GRPCInferenceServiceClient
	model     string
	decoupled bool
	// controls are the sequence control inputs the gateway adds (from the model's config); the
	// backend adds its own, so they are not forwarded.
	controls map[string]bool
}

func (f *forwarder) configure(cfg *inference.ModelConfig) {
	f.decoupled = cfg.GetModelTransactionPolicy().GetDecoupled()
	for _, c := range cfg.GetSequenceBatching().GetControlInput() {
		if f.controls == nil {
			f.controls = map[string]bool{}
		}
		f.controls[c.GetName()] = true
	}
}

func (f *forwarder) execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	wreq := f.request(req)
	if f.decoupled {
		return f.stream(ctx, wreq, send)
	}
	res, err := f.client.ModelInfer(ctx, wreq)
	if err != nil {
		return f.backendError(err)
	}
	out, err := f.response(res.GetOutputs(), res.GetRawOutputContents())
	if err != nil {
		return err
	}
	out.Parameters = res.GetParameters()
	return send(out)
}

// stream runs a decoupled request: every response the backend streams is sent on, the last
// one marked final.
func (f *forwarder) stream(ctx context.Context, wreq *inference.ModelInferRequest, send func(*engines.Response) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wreq.Parameters[paramEmptyFinal] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}
	st, err := f.client.ModelStreamInfer(ctx)
	if err != nil {
		return f.backendError(err)
	}
	if err := st.Send(wreq); err != nil {
		_, err = st.Recv() // the stream's status says why
		return f.backendError(err)
	}
	if err := st.CloseSend(); err != nil {
		return f.backendError(err)
	}
	for {
		res, err := st.Recv()
		if err == io.EOF {
			return nil // ended without a final response: the gateway sends a flags-only final
		}
		if err != nil {
			return f.backendError(err)
		}
		if msg := res.GetErrorMessage(); msg != "" {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("backend of model '%s': %s", f.model, msg))
		}
		ir := res.GetInferResponse()
		params := ir.GetParameters()
		final := params[paramFinalResponse].GetBoolParam()
		delete(params, paramFinalResponse)
		out, err := f.response(ir.GetOutputs(), ir.GetRawOutputContents())
		if err != nil {
			return err
		}
		out.Parameters, out.Final = params, final
		if err := send(out); err != nil {
			return err
		}
		if final {
			return nil
		}
	}
}

// request is req as a KServe request to the backend; tensor bytes are shared, not copied.
func (f *forwarder) request(req *engines.Request) *inference.ModelInferRequest {
	w := &inference.ModelInferRequest{ModelName: f.model, Id: req.ID,
		Parameters: make(map[string]*inference.InferParameter, len(req.Parameters)+3)}
	for k, v := range req.Parameters {
		w.Parameters[k] = v
	}
	for i := range req.Inputs {
		t := &req.Inputs[i]
		if f.controls[t.Name] {
			continue
		}
		w.Inputs = append(w.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: t.Name, Datatype: tensor.Name(t.Datatype), Shape: t.Shape})
		w.RawInputContents = append(w.RawInputContents, t.Data)
	}
	for _, o := range req.Outputs {
		w.Outputs = append(w.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
	}
	if seq := req.Sequence; !seq.ID.IsZero() {
		switch {
		case seq.ID.Text != "":
			w.Parameters[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: seq.ID.Text}}
		case seq.ID.Uint <= math.MaxInt64:
			w.Parameters[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(seq.ID.Uint)}}
		default:
			w.Parameters[paramSequenceID] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: seq.ID.Uint}}
		}
		w.Parameters[paramSequenceStart] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: seq.Start}}
		w.Parameters[paramSequenceEnd] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: seq.End}}
	}
	return w
}

// response turns a backend's outputs into the gateway's, checking every size against the bytes
// present: the backend is not trusted to be consistent.
func (f *forwarder) response(outs []*inference.ModelInferResponse_InferOutputTensor, raw [][]byte) (*engines.Response, error) {
	if len(raw) > 0 && len(raw) != len(outs) {
		return nil, f.badResponse("it has %d outputs but %d raw_output_contents", len(outs), len(raw))
	}
	res := &engines.Response{Outputs: make([]engines.Tensor, len(outs))}
	for i, o := range outs {
		t := &res.Outputs[i]
		t.Name, t.Shape = o.GetName(), o.GetShape()
		t.Datatype = tensor.ParseDatatype(o.GetDatatype())
		if !tensor.Valid(t.Datatype) {
			return nil, f.badResponse("output '%s' has datatype '%s'", t.Name, o.GetDatatype())
		}
		if len(raw) > 0 {
			if o.GetContents() != nil {
				return nil, f.badResponse("output '%s' has both contents and raw_output_contents", t.Name)
			}
			t.Data = raw[i]
		} else {
			data, err := tensor.FromContents(t.Datatype, o.GetContents())
			if err != nil {
				return nil, f.badResponse("output '%s': %v", t.Name, err)
			}
			t.Data = data
		}
		n, ok := tensor.ElementCount(t.Shape)
		if !ok {
			return nil, f.badResponse("output '%s' has shape %v", t.Name, t.Shape)
		}
		if t.Datatype == inference.DataType_TYPE_STRING {
			if got, err := tensor.CountBytes(t.Data); err != nil || int64(got) != n {
				return nil, f.badResponse("output '%s' of shape %v does not hold %d framed BYTES elements", t.Name, t.Shape, n)
			}
		} else if size := tensor.ElementSize(t.Datatype); n > int64(len(t.Data))/int64(size) || n*int64(size) != int64(len(t.Data)) {
			return nil, f.badResponse("output '%s' of shape %v has %d bytes", t.Name, t.Shape, len(t.Data))
		}
	}
	return res, nil
}

func (f *forwarder) badResponse(format string, args ...any) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("backend of model '%s' sent an invalid response: %s", f.model, fmt.Sprintf(format, args...)))
}

// backendError keeps the backend's code and message.
func (f *forwarder) backendError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st := status.Convert(err)
	return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
}
