package embed

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// TensorSpec declares a tensor model: its tensors as KServe datatypes ("FP32", "BYTES", ...)
// and dims (-1 for any size; without the batch dimension when MaxBatchSize > 0, as in Triton).
type TensorSpec struct {
	Name         string       `json:"name"`
	Inputs       []TensorDecl `json:"inputs"`
	Outputs      []TensorDecl `json:"outputs"`
	MaxBatchSize int32        `json:"max_batch_size"`
}

// TensorDecl is one declared tensor.
type TensorDecl struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// TensorFunc runs one validated request and returns its outputs (any order; the requested ones,
// or all). The inputs' Data must not be kept after it returns. An error it returns as a
// *connect.Error keeps its code; any other is INTERNAL.
type TensorFunc func(ctx context.Context, req *engines.Request) ([]engines.Tensor, error)

// maxDims bounds a declared tensor's rank, as Triton's tensors are bounded.
const maxDims = 64

// ModelConfig is spec as Triton's model config, or an error naming what is wrong with it.
func (spec TensorSpec) ModelConfig() (*inference.ModelConfig, error) {
	if err := validName(spec.Name); err != nil {
		return nil, err
	}
	if len(spec.Inputs) == 0 || len(spec.Outputs) == 0 {
		return nil, fmt.Errorf("model '%s': needs at least one input and one output", spec.Name)
	}
	if spec.MaxBatchSize < 0 {
		return nil, fmt.Errorf("model '%s': max_batch_size %d is negative", spec.Name, spec.MaxBatchSize)
	}
	cfg := &inference.ModelConfig{Name: spec.Name, Backend: "python", MaxBatchSize: spec.MaxBatchSize}
	seen := map[string]bool{}
	check := func(kind string, d TensorDecl) (inference.DataType, error) {
		if d.Name == "" || seen[kind+d.Name] {
			return 0, fmt.Errorf("model '%s': %s name %q is empty or repeated", spec.Name, kind, d.Name)
		}
		seen[kind+d.Name] = true
		dt := tensor.ParseDatatype(d.Datatype)
		if !tensor.Valid(dt) {
			return 0, fmt.Errorf("model '%s': %s '%s': unknown datatype %q", spec.Name, kind, d.Name, d.Datatype)
		}
		if len(d.Shape) == 0 || len(d.Shape) > maxDims {
			return 0, fmt.Errorf("model '%s': %s '%s': shape needs 1 to %d dims", spec.Name, kind, d.Name, maxDims)
		}
		for _, n := range d.Shape {
			if n < -1 || n == 0 {
				return 0, fmt.Errorf("model '%s': %s '%s': dim %d is not -1 or positive", spec.Name, kind, d.Name, n)
			}
		}
		return dt, nil
	}
	for _, d := range spec.Inputs {
		dt, err := check("input", d)
		if err != nil {
			return nil, err
		}
		cfg.Input = append(cfg.Input, &inference.ModelInput{Name: d.Name, DataType: dt, Dims: slices.Clone(d.Shape)})
	}
	for _, d := range spec.Outputs {
		dt, err := check("output", d)
		if err != nil {
			return nil, err
		}
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: d.Name, DataType: dt, Dims: slices.Clone(d.Shape)})
	}
	return cfg, nil
}

// RegisterTensorModel serves fn as the tensor model spec declares. A duplicate name or an invalid
// spec is an error, and nothing is registered.
func (g *Gateway) RegisterTensorModel(spec TensorSpec, fn TensorFunc) error {
	cfg, err := spec.ModelConfig()
	if err != nil {
		return err
	}
	if _, err := g.app.Models.Register(&funcModel{cfg: cfg, fn: fn}); err != nil {
		return fmt.Errorf("model '%s': %w", spec.Name, err)
	}
	return nil
}

// funcModel is a TensorFunc as an engines.Model.
type funcModel struct {
	cfg *inference.ModelConfig
	fn  TensorFunc
}

func (m *funcModel) Config() *inference.ModelConfig { return m.cfg }

type result struct {
	out []engines.Tensor
	err error
}

func (m *funcModel) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	// The function runs on its own goroutine so that a request whose deadline passes, or whose
	// client leaves, is answered at once even while the function goes on (it cannot be
	// interrupted); its outputs are then dropped.
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' panicked: %v", m.cfg.GetName(), p))}
			}
		}()
		out, err := m.fn(ctx, req)
		done <- result{out, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return connect.NewError(code, fmt.Errorf("model '%s' did not answer in time: %w", m.cfg.GetName(), ctx.Err()))
	}
	if r.err != nil {
		var ce *connect.Error
		if errors.As(r.err, &ce) {
			return r.err
		}
		return connect.NewError(connect.CodeInternal, r.err)
	}
	outs, err := m.order(req, r.out)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	return send(&engines.Response{Outputs: outs, Final: true})
}

// order checks the function's outputs against the config and returns the requested ones in
// config order.
func (m *funcModel) order(req *engines.Request, got []engines.Tensor) ([]engines.Tensor, error) {
	name := m.cfg.GetName()
	byName := make(map[string]*engines.Tensor, len(got))
	for i := range got {
		t := &got[i]
		if _, dup := byName[t.Name]; dup {
			return nil, fmt.Errorf("model '%s' returned output '%s' twice", name, t.Name)
		}
		byName[t.Name] = t
	}
	out := make([]engines.Tensor, 0, len(m.cfg.GetOutput()))
	for _, o := range m.cfg.GetOutput() {
		t := byName[o.GetName()]
		delete(byName, o.GetName())
		wanted := len(req.Outputs) == 0 || slices.Contains(req.Outputs, o.GetName())
		if !wanted {
			continue
		}
		if t == nil {
			return nil, fmt.Errorf("model '%s' did not return output '%s'", name, o.GetName())
		}
		if err := m.check(o, t); err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	for n := range byName {
		return nil, fmt.Errorf("model '%s' returned output '%s', which its config does not declare", name, n)
	}
	return out, nil
}

// check verifies that t is what o declares and that its data matches its shape.
func (m *funcModel) check(o *inference.ModelOutput, t *engines.Tensor) error {
	name := m.cfg.GetName()
	if t.Datatype != o.GetDataType() {
		return fmt.Errorf("model '%s' returned output '%s' as %s, declared %s", name, t.Name, tensor.Name(t.Datatype), tensor.Name(o.GetDataType()))
	}
	dims := o.GetDims()
	shape := t.Shape
	if m.cfg.GetMaxBatchSize() > 0 {
		if len(shape) == 0 || shape[0] < 0 || shape[0] > int64(m.cfg.GetMaxBatchSize()) {
			return fmt.Errorf("model '%s' returned output '%s' with shape %v: the batch dimension is missing or over %d", name, t.Name, shape, m.cfg.GetMaxBatchSize())
		}
		shape = shape[1:]
	}
	if len(shape) != len(dims) {
		return fmt.Errorf("model '%s' returned output '%s' with shape %v, declared %v", name, t.Name, t.Shape, dims)
	}
	for i, d := range dims {
		if d != -1 && shape[i] != d {
			return fmt.Errorf("model '%s' returned output '%s' with shape %v, declared %v", name, t.Name, t.Shape, dims)
		}
	}
	n, ok := tensor.ElementCount(t.Shape)
	if !ok {
		return fmt.Errorf("model '%s' returned output '%s' with invalid shape %v", name, t.Name, t.Shape)
	}
	if size := tensor.ElementSize(t.Datatype); size > 0 {
		if n > int64(len(t.Data))/int64(size) || n*int64(size) != int64(len(t.Data)) {
			return fmt.Errorf("model '%s' returned output '%s' with %d bytes, shape %v needs %d", name, t.Name, len(t.Data), t.Shape, n*int64(size))
		}
		return nil
	}
	c, err := tensor.CountBytes(t.Data)
	if err != nil || int64(c) != n {
		return fmt.Errorf("model '%s' returned BYTES output '%s' whose data does not hold %d elements", name, t.Name, n)
	}
	return nil
}
