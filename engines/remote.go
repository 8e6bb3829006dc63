package engines

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/lib/tensor"
	"google.golang.org/protobuf/proto"
)

// Platform and backend a remote model reports when it describes itself by its tensors only.
const (
	RemotePlatform = "infergate_remote"
	RemoteBackend  = "remote"
)

// ExecuteFunc runs one validated request, with the contract of Model.Execute.
type ExecuteFunc func(ctx context.Context, req *Request, send func(*Response) error) error

// RemoteModel is a model whose backend runs outside the gateway and describes itself, the way
// Dynamo's tensor models do (kserve.md 4.6): by an infergate.tensor.v1.TensorModelConfig, either
// its tensors or a serialized Triton inference.ModelConfig. The registry serves it like any model:
// ModelMetadata, ModelConfig and request validation all follow the config built here.
//
// This is the model side of remote backend registration. A registration service (a Connect
// RegistryService whose backends hold a lease) decodes the TensorModelConfig a backend sends,
// calls NewRemoteModel (or Registry.RegisterRemote) with an ExecuteFunc that forwards requests to
// that backend, and on the lease's expiry calls Registry.Unload; the transport, the leases and
// re-registration are that service's, not this type's.
type RemoteModel struct {
	cfg  *inference.ModelConfig
	exec ExecuteFunc
}

// NewRemoteModel builds the model a backend describes with desc; exec runs its requests.
//
// When desc.triton_model_config is set it supersedes the rest of desc: it is decoded (unknown
// fields included) and becomes the model's config as it is, so ModelConfig returns it verbatim;
// it must name the model, and desc.name, if set, must be the same name. Otherwise the config is
// built from desc's tensors, with TensorMetadata shapes as ModelMetadata reports them: for a
// model with max_batch_size > 0 every shape starts with the batch dimension -1, which the
// config's dims leave out, as Triton's do. Either way a config that cannot be served (no name,
// no outputs, an unknown datatype, a repeated tensor name) is an INVALID_ARGUMENT error.
func NewRemoteModel(desc *tensorv1.TensorModelConfig, exec ExecuteFunc) (*RemoteModel, error) {
	if exec == nil {
		return nil, errors.New("engines: remote model has no ExecuteFunc")
	}
	var (
		cfg *inference.ModelConfig
		err error
	)
	if b := desc.GetTritonModelConfig(); len(b) > 0 {
		cfg, err = tritonConfig(desc.GetName(), b)
	} else {
		cfg, err = tensorConfig(desc)
	}
	if err != nil {
		return nil, err
	}
	if err := checkRemoteConfig(cfg); err != nil {
		return nil, err
	}
	return &RemoteModel{cfg: cfg, exec: exec}, nil
}

// RegisterRemote registers the model a backend describes with desc; see NewRemoteModel.
func (r *Registry) RegisterRemote(desc *tensorv1.TensorModelConfig, exec ExecuteFunc) (*Entry, error) {
	m, err := NewRemoteModel(desc, exec)
	if err != nil {
		return nil, err
	}
	return r.Register(m)
}

// Config is the config the backend supplied (Triton's, verbatim) or the one built from its tensors.
func (m *RemoteModel) Config() *inference.ModelConfig { return m.cfg }

// Execute forwards the request to the backend.
func (m *RemoteModel) Execute(ctx context.Context, req *Request, send func(*Response) error) error {
	return m.exec(ctx, req, send)
}

func remoteInvalid(model, format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("remote model '%s': %s", model, fmt.Sprintf(format, args...)))
}

func tritonConfig(name string, b []byte) (*inference.ModelConfig, error) {
	cfg := new(inference.ModelConfig)
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, remoteInvalid(name, "triton_model_config is not a serialized inference.ModelConfig: %v", err)
	}
	if cfg.GetName() == "" {
		return nil, remoteInvalid(name, "triton_model_config has no name")
	}
	if name != "" && cfg.GetName() != name {
		return nil, remoteInvalid(name, "triton_model_config names model '%s'", cfg.GetName())
	}
	return cfg, nil
}

func tensorConfig(desc *tensorv1.TensorModelConfig) (*inference.ModelConfig, error) {
	name := desc.GetName()
	if name == "" {
		return nil, remoteInvalid(name, "the config has no name")
	}
	cfg := &inference.ModelConfig{
		Name:         name,
		Platform:     RemotePlatform,
		Backend:      RemoteBackend,
		MaxBatchSize: desc.GetMaxBatchSize(),
		VersionPolicy: &inference.ModelVersionPolicy{
			PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}},
		},
	}
	if cfg.MaxBatchSize < 0 {
		return nil, remoteInvalid(name, "max_batch_size %d is negative", cfg.MaxBatchSize)
	}
	if desc.GetDecoupled() {
		cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
	}
	tensorOf := func(kind string, t *tensorv1.TensorMetadata) (inference.DataType, []int64, error) {
		dt := tensor.ParseDatatype(t.GetDatatype())
		if dt == inference.DataType_TYPE_INVALID {
			return dt, nil, remoteInvalid(name, "%s '%s' has unknown datatype '%s'", kind, t.GetName(), t.GetDatatype())
		}
		dims := t.GetShape()
		if cfg.MaxBatchSize > 0 {
			if len(dims) == 0 || dims[0] != -1 {
				return dt, nil, remoteInvalid(name, "%s '%s' has shape %s, but the model batches (max_batch_size %d): it must start with the batch dimension -1",
					kind, t.GetName(), dimsString(dims), cfg.MaxBatchSize)
			}
			dims = dims[1:]
		}
		for _, d := range dims {
			if d < -1 {
				return dt, nil, remoteInvalid(name, "%s '%s' has dimension %d", kind, t.GetName(), d)
			}
		}
		return dt, append([]int64{}, dims...), nil
	}
	for _, t := range desc.GetInputs() {
		dt, dims, err := tensorOf("input", t)
		if err != nil {
			return nil, err
		}
		cfg.Input = append(cfg.Input, &inference.ModelInput{Name: t.GetName(), DataType: dt, Dims: dims, Optional: t.GetOptional()})
	}
	for _, t := range desc.GetOutputs() {
		if t.GetOptional() {
			return nil, remoteInvalid(name, "output '%s' is optional; only inputs can be", t.GetName())
		}
		dt, dims, err := tensorOf("output", t)
		if err != nil {
			return nil, err
		}
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: t.GetName(), DataType: dt, Dims: dims})
	}
	return cfg, nil
}

// checkRemoteConfig rejects configs the registry cannot serve, whichever way they were supplied.
func checkRemoteConfig(cfg *inference.ModelConfig) error {
	name := cfg.GetName()
	if len(cfg.GetOutput()) == 0 {
		return remoteInvalid(name, "the config has no outputs")
	}
	seen := map[string]bool{}
	check := func(kind, tn string, dt inference.DataType) error {
		switch {
		case tn == "":
			return remoteInvalid(name, "an %s has no name", kind)
		case seen[kind+tn]:
			return remoteInvalid(name, "%s '%s' is declared twice", kind, tn)
		case !tensor.Valid(dt):
			return remoteInvalid(name, "%s '%s' has datatype %s, which KServe cannot carry", kind, tn, dt)
		}
		seen[kind+tn] = true
		return nil
	}
	for _, in := range cfg.GetInput() {
		if err := check("input", in.GetName(), in.GetDataType()); err != nil {
			return err
		}
	}
	for _, out := range cfg.GetOutput() {
		if err := check("output", out.GetName(), out.GetDataType()); err != nil {
			return err
		}
	}
	return nil
}
