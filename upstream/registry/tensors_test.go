package registry

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// front is a gateway serving registered tensor models through a kserveproxy pool, as the runtime
// wires it.
type front struct {
	srv     *gatewaytest.Server
	pool    *kserveproxy.Proxy
	tensors KServeTensors
	kserve  inference.GRPCInferenceServiceClient
}

var _ KServePool = (*kserveproxy.Proxy)(nil)

// newPool is a started pool filling reg, with the TensorBackends on it (quick health checks).
func newPool(t *testing.T, reg *engines.Registry) (*kserveproxy.Proxy, KServeTensors) {
	t.Helper()
	pool, err := kserveproxy.New(kserveproxy.Options{Registry: reg, Logger: quiet()})
	require.NoError(t, err)
	pool.Start(context.Background())
	t.Cleanup(pool.Close)
	return pool, KServeTensors{Pool: pool, CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

func startFront(t *testing.T) *front {
	srv := gatewaytest.Start(t, gateway.Config{})
	pool, tensors := newPool(t, srv.Registry)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &front{srv: srv, pool: pool, tensors: tensors, kserve: inference.NewGRPCInferenceServiceClient(conn)}
}

// waitReady waits until the front serves model (its backend passed a health check).
func (f *front) waitReady(t *testing.T, model string) {
	t.Helper()
	require.Eventually(t, func() bool {
		res, err := f.kserve.ModelReady(context.Background(), &inference.ModelReadyRequest{Name: model})
		return err == nil && res.Ready
	}, wait, 10*time.Millisecond, "model %s never served", model)
}

// endpoint is the pool's status of a lease's endpoint; Name is empty when there is none.
func (f *front) endpoint(leaseID string) kserveproxy.EndpointStatus {
	for _, s := range f.pool.Status() {
		if s.Name == EndpointName(leaseID) {
			return s
		}
	}
	return kserveproxy.EndpointStatus{}
}

func outputText(t *testing.T, res *inference.ModelInferResponse) []string {
	t.Helper()
	require.Len(t, res.RawOutputContents, 1)
	elems, err := tensor.SplitBytes(res.RawOutputContents[0])
	require.NoError(t, err)
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = string(e)
	}
	return out
}

// A decoupled backend's responses stream through the gateway one by one, then the final flag.
func TestTensorLeaseDecoupled(t *testing.T) {
	desc := tensorDesc("words")
	desc.Decoupled = true
	m, err := engines.NewRemoteModel(desc, func(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
		elems, err := tensor.SplitBytes(req.Input("text_input").Data)
		if err != nil {
			return err
		}
		for _, e := range elems {
			if err := send(&engines.Response{Outputs: []engines.Tensor{{Name: "text_output", Datatype: inference.DataType_TYPE_STRING,
				Shape: []int64{1}, Data: tensor.AppendBytes(nil, e)}}}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	backend := gatewaytest.Start(t, gateway.Config{}, m)
	f := startFront(t)
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: newLeaseID(), Model: "words", URL: backend.URL, Config: desc}))
	f.waitReady(t, "words")

	st, err := f.kserve.ModelStreamInfer(context.Background())
	require.NoError(t, err)
	req := bytesRequest("words", "a", "b", "c")
	req.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
	require.NoError(t, st.Send(req))
	require.NoError(t, st.CloseSend())
	var words []string
	final := false
	for {
		res, err := st.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Empty(t, res.ErrorMessage)
		ir := res.InferResponse
		if ir.Parameters["triton_final_response"].GetBoolParam() {
			final = true
			assert.Empty(t, ir.Outputs, "a flags-only final")
			continue
		}
		words = append(words, outputText(t, ir)...)
	}
	assert.Equal(t, []string{"a", "b", "c"}, words)
	assert.True(t, final)
}

// The backend's errors reach the client with their code and message.
func TestTensorLeaseBackendErrors(t *testing.T) {
	m, err := engines.NewRemoteModel(tensorDesc("picky"), func(context.Context, *engines.Request, func(*engines.Response) error) error {
		return connect.NewError(connect.CodeResourceExhausted, errors.New("backend is full"))
	})
	require.NoError(t, err)
	backend := gatewaytest.Start(t, gateway.Config{}, m)
	f := startFront(t)
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: newLeaseID(), Model: "picky", URL: backend.URL, Config: tensorDesc("picky")}))
	f.waitReady(t, "picky")
	_, err = f.kserve.ModelInfer(context.Background(), bytesRequest("picky", "x"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "backend is full", status.Convert(err).Message())

	// A backend that is gone is UNAVAILABLE.
	require.NoError(t, backend.Stop(5e9))
	_, err = f.kserve.ModelInfer(context.Background(), bytesRequest("picky", "x"))
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// Every lease of a model serves it: requests are shared, a stopped backend's requests fail over
// to the others, a higher priority takes them all, and a lease's end takes only its endpoint away;
// the last one's takes the model. A name the gateway already serves is not taken over, nor removed.
func TestTensorLeasesOfOneModel(t *testing.T) {
	first := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "shared"))
	second := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "shared"))
	f := startFront(t)
	l1, l2 := newLeaseID(), newLeaseID()
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: l1, Model: "shared", URL: first.URL, Config: tensorDesc("shared")}))
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: l2, Model: "shared", URL: second.URL, Config: tensorDesc("shared")}))
	// A check marks an endpoint healthy a moment before the routes its models join are rebuilt:
	// wait for both.
	require.Eventually(t, func() bool {
		a, b := f.endpoint(l1), f.endpoint(l2)
		return a.Healthy && b.Healthy && len(a.Models) > 0 && len(b.Models) > 0
	}, wait, 10*time.Millisecond)
	assert.Equal(t, []string{"shared"}, f.endpoint(l1).Models)
	assert.Equal(t, []string{"shared"}, f.endpoint(l2).Models)
	assert.Equal(t, first.URL, f.endpoint(l1).URL)
	ctx := context.Background()
	infer := func() {
		t.Helper()
		res, err := f.kserve.ModelInfer(ctx, bytesRequest("shared", "x"))
		require.NoError(t, err)
		assert.Equal(t, []string{"x"}, outputText(t, res))
	}
	ran := func(s *gatewaytest.Server) uint64 { return s.Registry.Lookup("shared").Stats.Inferences() }
	for range 4 {
		infer()
	}
	assert.Equal(t, uint64(2), ran(first), "both leases serve, in turn")
	assert.Equal(t, uint64(2), ran(second))

	// A higher priority lease takes every request while it is healthy.
	third := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "shared"))
	l3 := newLeaseID()
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: l3, Model: "shared", URL: third.URL, Priority: 1, Config: tensorDesc("shared")}))
	require.Eventually(t, func() bool { e := f.endpoint(l3); return e.Healthy && len(e.Models) > 0 }, wait, 10*time.Millisecond)
	assert.Equal(t, 1, f.endpoint(l3).Priority)
	infer()
	infer()
	assert.Equal(t, uint64(2), ran(third))
	f.tensors.Remove(l3)
	assert.Empty(t, f.endpoint(l3).Name, "its endpoint is gone")

	// A backend that went away: its requests go to the other lease.
	require.NoError(t, first.Stop(5e9))
	for range 4 {
		infer()
	}
	assert.Equal(t, uint64(6), ran(second), "failed over")

	f.tensors.Remove(l1)
	assert.Empty(t, f.endpoint(l1).Name)
	infer()
	assert.Equal(t, uint64(7), ran(second))

	f.tensors.Remove(l2)
	_, err := f.kserve.ModelInfer(ctx, bytesRequest("shared", "x"))
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Nil(t, f.srv.Registry.Lookup("shared"))

	// "simple" is a built-in of every gateway.
	l4 := newLeaseID()
	err = f.tensors.Add(TensorBackend{LeaseID: l4, Model: "simple", URL: second.URL, Config: tensorDesc("simple")})
	assert.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err), "%v", err)
	assert.Empty(t, f.endpoint(l4).Name, "nothing added")
	builtin := f.srv.Registry.Lookup("simple")
	require.NotNil(t, builtin)
	assert.Equal(t, "infergate_cpu", builtin.Config().GetPlatform())
}

// The Applier turns a tensor lease's events into the pool's endpoint: added (the config named for
// the lease's model), moved to a new URL on update, removed with the model on removal.
func TestApplierTensorLease(t *testing.T) {
	first := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "applied"))
	second := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "applied"))
	f := startFront(t)
	ap := NewApplier(ApplierOptions{Tensors: f.tensors, Logger: quiet()})
	id := newLeaseID()
	backend := func(url string) *registryv1.Backend {
		return &registryv1.Backend{ModelName: "applied", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR, Url: url,
			TensorModelConfig: tensorDesc("")}
	}
	ctx := context.Background()
	ap.Apply(Event{Type: Added, LeaseID: id, Backend: backend(first.URL)})
	f.waitReady(t, "applied")
	_, err := f.kserve.ModelInfer(ctx, bytesRequest("applied", "x"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), first.Registry.Lookup("applied").Stats.Inferences())

	ap.Apply(Event{Type: Updated, LeaseID: id, Backend: backend(second.URL)})
	require.Equal(t, second.URL, f.endpoint(id).URL, "the lease's endpoint now points at the new URL")
	f.waitReady(t, "applied")
	_, err = f.kserve.ModelInfer(ctx, bytesRequest("applied", "x"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), second.Registry.Lookup("applied").Stats.Inferences())
	assert.Equal(t, uint64(1), first.Registry.Lookup("applied").Stats.Inferences())

	ap.Apply(Event{Type: Removed, LeaseID: id})
	assert.Nil(t, f.srv.Registry.Lookup("applied"))
	assert.Empty(t, f.pool.Status())
}
