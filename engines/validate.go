package engines

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/lib/tensor"
)

// Validate checks a decoded request against the model's config, in the order Triton does and with
// Triton's messages (all INVALID_ARGUMENT): input and output names, missing inputs, datatypes,
// batch size, shapes, byte sizes and BYTES framing. Every protocol adapter calls it, so the same bad
// request gets the same message on every surface.
func (e *Entry) Validate(req *Request) error {
	name := e.cfg.GetName()
	for i := range req.Inputs {
		in := req.Inputs[i].Name
		if _, ok := e.inputs[in]; !ok {
			return invalid("unexpected inference input '%s' for model '%s'", in, name)
		}
		for j := range i {
			if req.Inputs[j].Name == in {
				return invalid("input '%s' already exists in request", in)
			}
		}
	}
	if err := e.checkMissing(req); err != nil {
		return err
	}
	for i, out := range req.Outputs {
		if _, ok := e.outputs[out]; !ok {
			return invalid("unexpected inference output '%s' for model '%s'", out, name)
		}
		for j := range i {
			if req.Outputs[j] == out {
				return invalid("output '%s' already exists in request", out)
			}
		}
	}
	if rs, ok := e.model.(InputReshaper); ok {
		rs.ReshapeInputs(req)
	}
	for i := range req.Inputs {
		t := &req.Inputs[i]
		for _, d := range t.Shape {
			if d < 0 {
				return invalid("All input dimensions should be specified for input '%s' for model '%s', got %s",
					t.Name, name, dimsString(t.Shape))
			}
		}
	}
	mbs := int64(e.cfg.GetMaxBatchSize())
	if mbs > 0 {
		// Like Triton, settle the batch size across all inputs before checking each one.
		var batch int64
		for i := range req.Inputs {
			t := &req.Inputs[i]
			if len(t.Shape) == 0 {
				return invalid("input '%s' has no shape but model requires batch dimension for '%s'", t.Name, name)
			}
			if i == 0 {
				batch = t.Shape[0]
			} else if t.Shape[0] != batch {
				return invalid("input '%s' batch size does not match other inputs for '%s'", t.Name, name)
			}
		}
		if batch > mbs {
			return invalid("inference request batch-size must be <= %d for '%s'", mbs, name)
		}
	}
	for i := range req.Inputs {
		t := &req.Inputs[i]
		mi := e.cfg.GetInput()[e.inputs[t.Name]]
		if t.Datatype != mi.GetDataType() {
			return invalid("inference input '%s' data-type is '%s', but model '%s' expects '%s'",
				t.Name, tensor.Name(t.Datatype), name, tensor.Name(mi.GetDataType()))
		}
		dims := t.Shape
		if mbs > 0 {
			dims = t.Shape[1:]
		}
		if !dimsMatch(mi.GetDims(), dims) {
			want := mi.GetDims()
			if mbs > 0 {
				want = append([]int64{-1}, want...)
			}
			msg := fmt.Sprintf("unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
				t.Name, name, dimsString(want), dimsString(t.Shape))
			if mbs > 0 {
				msg += ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for allowed max_batch_size values."
			}
			return connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
		}
		if err := checkData(t, name); err != nil {
			return err
		}
	}
	return nil
}

func (e *Entry) checkMissing(req *Request) error {
	present := 0
	for i := range req.Inputs {
		if !e.cfg.GetInput()[e.inputs[req.Inputs[i].Name]].GetOptional() {
			present++
		}
	}
	if present == e.required {
		return nil
	}
	var got, missing []string
	for i := range req.Inputs {
		got = append(got, "'"+req.Inputs[i].Name+"'")
	}
	for _, in := range e.cfg.GetInput() {
		if !in.GetOptional() && req.Input(in.GetName()) == nil {
			missing = append(missing, "'"+in.GetName()+"'")
		}
	}
	expected := strconv.Itoa(e.required)
	if n := len(e.cfg.GetInput()); n != e.required {
		expected = "number of inputs between " + strconv.Itoa(e.required) + " and " + strconv.Itoa(n)
	}
	return invalid("expected %s inputs but got %d inputs for model '%s'. Got input(s) [%s], but missing required input(s) [%s]. Please provide all required input(s).",
		expected, len(req.Inputs), e.cfg.GetName(), strings.Join(got, ","), strings.Join(missing, ","))
}

// checkData compares a tensor's bytes with what its shape and datatype require.
func checkData(t *Tensor, model string) error {
	n, ok := tensor.ElementCount(t.Shape)
	if !ok {
		return invalid("input '%s' for model '%s' has a shape with too many elements: %s", t.Name, model, dimsString(t.Shape))
	}
	if size := tensor.ElementSize(t.Datatype); size > 0 {
		if n > math.MaxInt64/int64(size) {
			return invalid("input '%s' for model '%s' has a shape with too many elements: %s", t.Name, model, dimsString(t.Shape))
		}
		if n*int64(size) != int64(t.ByteLen()) {
			return invalid("input byte size mismatch for input '%s' for model '%s'. Expected %d, got %d",
				t.Name, model, n*int64(size), t.ByteLen())
		}
		return nil
	}
	if t.Device != nil {
		return invalid("input '%s' for model '%s' is of a variable-size datatype, which cannot be read from GPU memory", t.Name, model)
	}
	got, err := tensor.CountBytes(t.Data)
	if err != nil {
		fe, _ := err.(*tensor.FramingError)
		if fe == nil {
			return invalid("malformed string data for inference input '%s' for model '%s': %v", t.Name, model, err)
		}
		if fe.Truncated {
			return invalid("incomplete string for inference input '%s' for model '%s', expecting string of length %d but only %d bytes available",
				t.Name, model, fe.Want, fe.Have)
		}
		return invalid("incomplete string length indicator for inference input '%s' for model '%s', expecting 4 bytes but only %d bytes available. Please make sure the string length indicator is in one buffer.",
			t.Name, model, fe.Have)
	}
	if int64(got) != n {
		return invalid("expected %d string elements for inference input '%s' for model '%s', got %d", n, t.Name, model, got)
	}
	return nil
}

func dimsMatch(want, got []int64) bool {
	if len(want) != len(got) {
		return false
	}
	for i, d := range want {
		if d != -1 && d != got[i] {
			return false
		}
	}
	return true
}

// dimsString prints dims as Triton does: "[-1,16]".
func dimsString(dims []int64) string {
	b := make([]byte, 0, 2+len(dims)*4)
	b = append(b, '[')
	for i, d := range dims {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}
