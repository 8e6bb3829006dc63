package kserve

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// Triton's classification extension: a requested output with parameter classification=k comes
// back as a BYTES tensor of its k largest elements per batch item, each "value:index" (Triton
// adds ":label" from a label file; infergate's models have none), largest first. Clients of
// image models ask for it instead of downloading the whole score vector.

const paramClassification = "classification"

// parseClassification reads the classification parameter of each requested output. It returns
// nil when no output asks for one, else one count per requested output (0: not classified).
func parseClassification(e *engines.Entry, outs []*inference.ModelInferRequest_InferRequestedOutputTensor) ([]int, error) {
	var counts []int
	for i, o := range outs {
		p, ok := o.GetParameters()[paramClassification]
		if !ok {
			continue
		}
		v, isInt := p.GetParameterChoice().(*inference.InferParameter_Int64Param)
		if !isInt {
			return nil, wrongType(paramClassification, "int64_param")
		}
		if v.Int64Param <= 0 {
			return nil, invalid("invalid value for 'classification' parameter of output '%s' for model '%s', expected a count > 0, got %d.", o.GetName(), e.Name(), v.Int64Param)
		}
		for _, mo := range e.Config().GetOutput() {
			if mo.GetName() == o.GetName() && classValue(mo.GetDataType()) == nil {
				return nil, invalid("class result not available for output '%s' of model '%s' due to unsupported type '%s'", o.GetName(), e.Name(), tensor.Name(mo.GetDataType()))
			}
		}
		if counts == nil {
			counts = make([]int, len(outs))
		}
		counts[i] = int(min(v.Int64Param, math.MaxInt32))
	}
	return counts, nil
}

// classify replaces t by its top-k classification. For a batching model the first dimension is
// the batch and each batch item is classified on its own.
func classify(e *engines.Entry, t *engines.Tensor, k int) (engines.Tensor, error) {
	size := tensor.ElementSize(t.Datatype)
	value := classValue(t.Datatype)
	if value == nil || size <= 0 {
		return engines.Tensor{}, connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' produced output '%s' as '%s', which cannot be classified", e.Name(), t.Name, tensor.Name(t.Datatype)))
	}
	batch, shape := int64(1), t.Shape
	if e.Config().GetMaxBatchSize() > 0 && len(shape) > 0 {
		batch, shape = shape[0], shape[1:]
	}
	total, okTotal := tensor.ElementCount(t.Shape)
	perItem, okItem := tensor.ElementCount(shape)
	if !okTotal || !okItem || len(t.Data)%size != 0 || total != int64(len(t.Data)/size) {
		return engines.Tensor{}, connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' produced output '%s' with %d bytes for shape %v", e.Name(), t.Name, len(t.Data), t.Shape))
	}
	k = int(min(int64(k), perItem))
	type scored struct {
		v float64
		i int
	}
	items := make([]scored, perItem)
	var out []byte
	for b := range batch {
		item := t.Data[b*perItem*int64(size) : (b+1)*perItem*int64(size)]
		for i := range items {
			items[i] = scored{value(item[i*size:]), i}
		}
		slices.SortStableFunc(items, func(x, y scored) int { return cmp.Compare(y.v, x.v) })
		for _, s := range items[:k] {
			label := formatClassValue(t.Datatype, item[s.i*size:]) + ":" + strconv.Itoa(s.i)
			out = binary.LittleEndian.AppendUint32(out, uint32(len(label)))
			out = append(out, label...)
		}
	}
	res := engines.Tensor{Name: t.Name, Datatype: inference.DataType_TYPE_STRING, Shape: []int64{int64(k)}, Data: out}
	if e.Config().GetMaxBatchSize() > 0 && len(t.Shape) > 0 {
		res.Shape = []int64{batch, int64(k)}
	}
	return res, nil
}

// classValue returns the decoder of one element of dt as float64, or nil when dt cannot be
// classified (BOOL, BYTES and the half-precision types, as in Triton).
func classValue(dt inference.DataType) func([]byte) float64 {
	le := binary.LittleEndian
	switch dt {
	case inference.DataType_TYPE_UINT8:
		return func(b []byte) float64 { return float64(b[0]) }
	case inference.DataType_TYPE_UINT16:
		return func(b []byte) float64 { return float64(le.Uint16(b)) }
	case inference.DataType_TYPE_UINT32:
		return func(b []byte) float64 { return float64(le.Uint32(b)) }
	case inference.DataType_TYPE_UINT64:
		return func(b []byte) float64 { return float64(le.Uint64(b)) }
	case inference.DataType_TYPE_INT8:
		return func(b []byte) float64 { return float64(int8(b[0])) }
	case inference.DataType_TYPE_INT16:
		return func(b []byte) float64 { return float64(int16(le.Uint16(b))) }
	case inference.DataType_TYPE_INT32:
		return func(b []byte) float64 { return float64(int32(le.Uint32(b))) }
	case inference.DataType_TYPE_INT64:
		return func(b []byte) float64 { return float64(int64(le.Uint64(b))) }
	case inference.DataType_TYPE_FP32:
		return func(b []byte) float64 { return float64(math.Float32frombits(le.Uint32(b))) }
	case inference.DataType_TYPE_FP64:
		return func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }
	}
	return nil
}

// formatClassValue renders the element at b as Triton does (C++ std::to_string): integers exactly
// in decimal, floating point with six decimals. (Sorting goes through float64, which orders
// 64-bit integers beyond 2^53 only approximately; scores never get there.)
func formatClassValue(dt inference.DataType, b []byte) string {
	le := binary.LittleEndian
	switch dt {
	case inference.DataType_TYPE_FP32:
		return strconv.FormatFloat(float64(math.Float32frombits(le.Uint32(b))), 'f', 6, 32)
	case inference.DataType_TYPE_FP64:
		return strconv.FormatFloat(math.Float64frombits(le.Uint64(b)), 'f', 6, 64)
	case inference.DataType_TYPE_UINT64:
		return strconv.FormatUint(le.Uint64(b), 10)
	case inference.DataType_TYPE_INT64:
		return strconv.FormatInt(int64(le.Uint64(b)), 10)
	}
	return strconv.FormatFloat(classValue(dt)(b), 'f', -1, 64)
}
