// Package granitekserve is a granite.Backend over any KServe v2 model with the LLM text contract
// (text_input in, text_output out, BYTES tensors; optional sampling_parameters JSON and
// finish_reason), as Triton's vLLM and TensorRT-LLM backends and infergate's own bridge serve it.
//
// It calls ModelInfer through an Inferer: the gateway's own kserve.Service in-process (so the
// KServe path's validation, admission, statistics and upstream routing all apply), or a Connect or
// gRPC client of a remote server (inferenceconnect's simple client has the same method).
package granitekserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/tensor"
)

// Tensor names of the LLM text contract.
const (
	InputText      = "text_input"
	InputSampling  = "sampling_parameters"
	OutputText     = "text_output"
	OutputFinished = "finish_reason"
)

// DefaultMaxAnswerBytes bounds the text_output bytes one call accepts unless Options say otherwise.
const DefaultMaxAnswerBytes = 16 << 20

// Inferer runs one KServe v2 inference. *kserve.Service implements it (in-process), as does
// inferenceconnect's client built with connect.WithGRPC or the Connect protocol.
type Inferer interface {
	ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error)
}

// Options configure a Backend.
type Options struct {
	// Version is the model version to call ("" = the server's choice).
	Version string
	// MaxAnswerBytes bounds the text_output data of one answer (default DefaultMaxAnswerBytes);
	// a longer answer is an error, not truncated text.
	MaxAnswerBytes int
}

// Backend is a granite.Backend over one KServe model.
type Backend struct {
	inf   Inferer
	model string
	o     Options
}

var _ granite.Backend = (*Backend)(nil)

// New returns a Backend calling model through inf.
func New(inf Inferer, model string, o Options) *Backend {
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	return &Backend{inf: inf, model: model, o: o}
}

// reserved are completion fields the text contract carries otherwise (or not at all): the model is
// the KServe model, the prompt is text_input, and a Backend call is always whole.
var reserved = []string{"model", "prompt", "stream", "stream_options"}

// Generate sends the prompt as text_input and the completion parameters (minus model, prompt and
// stream) as the sampling_parameters JSON string, and returns one Generation per text_output
// element, each with its finish_reason element when the model sends one.
func (b *Backend) Generate(ctx context.Context, g granite.GenerateRequest) ([]granite.Generation, error) {
	req := &inference.ModelInferRequest{ModelName: b.model, ModelVersion: b.o.Version,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: InputText, Datatype: "BYTES", Shape: []int64{1}},
		},
		RawInputContents: [][]byte{tensor.JoinBytes([]string{g.Prompt})},
	}
	params := maps.Clone(g.Params)
	for _, k := range reserved {
		delete(params, k)
	}
	if len(params) > 0 {
		sp, err := json.Marshal(params)
		if err != nil {
			return nil, fmt.Errorf("granitekserve: encoding %s: %w", InputSampling, err)
		}
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: InputSampling, Datatype: "BYTES", Shape: []int64{1}})
		req.RawInputContents = append(req.RawInputContents, tensor.JoinBytes([][]byte{sp}))
	}
	res, err := b.inf.ModelInfer(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("granitekserve: model %q: %w", b.model, err)
	}
	gens, err := generations(res, b.o.MaxAnswerBytes)
	if err != nil {
		return nil, fmt.Errorf("granitekserve: model %q answered: %w", b.model, err)
	}
	return gens, nil
}

// generations reads text_output (and finish_reason, when present) of an answer, from raw or typed
// contents. Every length comes from the answer, so each is checked against the bytes present.
func generations(res *inference.ModelInferResponse, maxBytes int) ([]granite.Generation, error) {
	texts, err := output(res, OutputText, maxBytes)
	if err != nil {
		return nil, err
	}
	if texts == nil {
		return nil, fmt.Errorf("no %s output", OutputText)
	}
	reasons, err := output(res, OutputFinished, maxBytes)
	if err != nil {
		return nil, err
	}
	gens := make([]granite.Generation, len(texts))
	for i, t := range texts {
		gens[i].Text = string(t)
		if i < len(reasons) {
			gens[i].StopReason = string(reasons[i])
		}
	}
	return gens, nil
}

var errRawMismatch = errors.New("raw_output_contents does not match the outputs")

// output returns the BYTES elements of the named output, or nil when the answer has none.
func output(res *inference.ModelInferResponse, name string, maxBytes int) ([][]byte, error) {
	raw := res.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(res.GetOutputs()) {
		return nil, errRawMismatch
	}
	for i, o := range res.GetOutputs() {
		if o.GetName() != name {
			continue
		}
		if o.GetDatatype() != "BYTES" {
			return nil, fmt.Errorf("%s is %s, not BYTES", name, o.GetDatatype())
		}
		var data []byte
		if len(raw) > 0 {
			data = raw[i]
		} else {
			// Typed contents: size them before JoinBytes copies them into one buffer.
			size := 0
			for _, e := range o.GetContents().GetBytesContents() {
				size += 4 + len(e)
			}
			if size > maxBytes {
				return nil, fmt.Errorf("%s is over %d bytes", name, maxBytes)
			}
			var err error
			if data, err = tensor.FromContents(inference.DataType_TYPE_STRING, o.GetContents()); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		if len(data) > maxBytes {
			return nil, fmt.Errorf("%s is over %d bytes", name, maxBytes)
		}
		elems, err := tensor.SplitBytes(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if elems == nil {
			elems = [][]byte{}
		}
		return elems, nil
	}
	return nil, nil
}
