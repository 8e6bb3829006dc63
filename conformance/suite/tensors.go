package suite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/infergate/infergate/gen/inference"
)

// The suite's own tensor encoding: written from the protocol's definition (little-endian,
// row-major, BYTES as uint32-length-prefixed elements), independent of any server's codec.

// datatypes is the KServe v2 datatype list with element sizes; BYTES is variable (0).
var datatypes = map[string]int{
	"BOOL": 1, "UINT8": 1, "UINT16": 2, "UINT32": 4, "UINT64": 8,
	"INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8,
	"FP16": 2, "FP32": 4, "FP64": 8, "BF16": 2, "BYTES": 0,
}

// elements is the element count of shape, or -1 when a dimension is negative.
func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		n *= d
	}
	return n
}

// fill returns n elements of datatype dt in raw form: small values (i mod 4; BOOL i mod 2; BYTES
// the decimal text of i mod 4) that every example model accepts, including ones that parse strings
// as numbers.
func fill(dt string, n int) []byte { return pattern(dt, n, 4) }

// pattern returns n elements of datatype dt with values i mod m (BOOL: i mod 2; BYTES: their
// decimal text), each exact in every datatype for m <= 2048.
func pattern(dt string, n, m int) []byte {
	if dt == "BYTES" {
		elems := make([][]byte, n)
		for i := range elems {
			elems[i] = []byte(strconv.Itoa(i % m))
		}
		return frame(elems...)
	}
	size := datatypes[dt]
	out := make([]byte, n*size)
	for i := range n {
		v := uint64(i % m)
		switch dt {
		case "BOOL":
			v = uint64(i % 2)
		case "FP16":
			v = uint64(float16Bits(float32(v)))
		case "BF16":
			v = uint64(math.Float32bits(float32(v)) >> 16)
		case "FP32":
			v = uint64(math.Float32bits(float32(v)))
		case "FP64":
			v = math.Float64bits(float64(v))
		}
		putUint(out[i*size:], size, v)
	}
	return out
}

// float16Bits encodes the small non-negative integers fill uses as IEEE half precision.
func float16Bits(f float32) uint16 {
	if f == 0 {
		return 0
	}
	b := math.Float32bits(f)
	exp := int((b>>23)&0xff) - 127 + 15
	return uint16(exp<<10) | uint16((b>>13)&0x3ff)
}

func putUint(dst []byte, size int, v uint64) {
	switch size {
	case 1:
		dst[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(dst, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(dst, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(dst, v)
	}
}

func getUint(src []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(src[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(src))
	case 4:
		return uint64(binary.LittleEndian.Uint32(src))
	default:
		return binary.LittleEndian.Uint64(src)
	}
}

// frame encodes BYTES elements: each a uint32 little-endian length then its bytes.
func frame(elems ...[]byte) []byte {
	n := 0
	for _, e := range elems {
		n += 4 + len(e)
	}
	out := make([]byte, 0, n)
	for _, e := range elems {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	return out
}

// unframe splits raw BYTES data into its elements.
func unframe(raw []byte) ([][]byte, error) {
	var elems [][]byte
	for len(raw) > 0 {
		if len(raw) < 4 {
			return nil, fmt.Errorf("%d trailing bytes are not a length prefix", len(raw))
		}
		n := binary.LittleEndian.Uint32(raw)
		raw = raw[4:]
		if uint64(n) > uint64(len(raw)) {
			return nil, fmt.Errorf("element length %d runs past the %d bytes left", n, len(raw))
		}
		elems = append(elems, raw[:n])
		raw = raw[n:]
	}
	return elems, nil
}

func int32s(raw []byte) []int32 {
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func rawInt32s(v ...int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// toTyped converts raw data of datatype dt to InferTensorContents, the field the protocol assigns
// to dt; FP16 and BF16 have none.
func toTyped(dt string, raw []byte) (*inference.InferTensorContents, error) {
	c := &inference.InferTensorContents{}
	size := datatypes[dt]
	count := 0
	if size > 0 {
		count = len(raw) / size
	}
	for i := range count {
		v := getUint(raw[i*size:], size)
		switch dt {
		case "BOOL":
			c.BoolContents = append(c.BoolContents, v != 0)
		case "UINT8", "UINT16", "UINT32":
			c.UintContents = append(c.UintContents, uint32(v))
		case "UINT64":
			c.Uint64Contents = append(c.Uint64Contents, v)
		case "INT8":
			c.IntContents = append(c.IntContents, int32(int8(v)))
		case "INT16":
			c.IntContents = append(c.IntContents, int32(int16(v)))
		case "INT32":
			c.IntContents = append(c.IntContents, int32(v))
		case "INT64":
			c.Int64Contents = append(c.Int64Contents, int64(v))
		case "FP32":
			c.Fp32Contents = append(c.Fp32Contents, math.Float32frombits(uint32(v)))
		case "FP64":
			c.Fp64Contents = append(c.Fp64Contents, math.Float64frombits(v))
		default:
			return nil, fmt.Errorf("datatype %s has no typed contents field", dt)
		}
	}
	if dt == "BYTES" {
		elems, err := unframe(raw)
		if err != nil {
			return nil, err
		}
		c.BytesContents = elems
	}
	return c, nil
}

// fromTyped converts typed contents of datatype dt back to raw data.
func fromTyped(dt string, c *inference.InferTensorContents) ([]byte, error) {
	size := datatypes[dt]
	var out []byte
	put := func(v uint64) {
		b := make([]byte, size)
		putUint(b, size, v)
		out = append(out, b...)
	}
	switch dt {
	case "BOOL":
		for _, v := range c.GetBoolContents() {
			if v {
				put(1)
			} else {
				put(0)
			}
		}
	case "UINT8", "UINT16", "UINT32":
		for _, v := range c.GetUintContents() {
			put(uint64(v))
		}
	case "UINT64":
		for _, v := range c.GetUint64Contents() {
			put(v)
		}
	case "INT8", "INT16", "INT32":
		for _, v := range c.GetIntContents() {
			put(uint64(uint32(v)))
		}
	case "INT64":
		for _, v := range c.GetInt64Contents() {
			put(uint64(v))
		}
	case "FP32":
		for _, v := range c.GetFp32Contents() {
			put(uint64(math.Float32bits(v)))
		}
	case "FP64":
		for _, v := range c.GetFp64Contents() {
			put(math.Float64bits(v))
		}
	case "BYTES":
		return frame(c.GetBytesContents()...), nil
	default:
		return nil, fmt.Errorf("datatype %s has no typed contents field", dt)
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

var errNoData = errors.New("no data")

// outputData returns output i of resp in raw form, from raw_output_contents or, for servers that
// answer with typed contents, converted from them. Checks use it so that only the check about
// raw outputs fails on a server that sends typed ones.
func outputData(resp *inference.ModelInferResponse, i int) ([]byte, error) {
	if raw := resp.GetRawOutputContents(); i < len(raw) {
		return raw[i], nil
	}
	if i >= len(resp.GetOutputs()) {
		return nil, errNoData
	}
	out := resp.GetOutputs()[i]
	if out.GetContents() == nil {
		if len(resp.GetRawOutputContents()) == 0 && elements(out.GetShape()) == 0 {
			return []byte{}, nil
		}
		return nil, fmt.Errorf("output '%s' has neither raw_output_contents nor contents", out.GetName())
	}
	return fromTyped(out.GetDatatype(), out.GetContents())
}

// outputByName returns the named output's tensor and raw data.
func outputByName(resp *inference.ModelInferResponse, name string) (*inference.ModelInferResponse_InferOutputTensor, []byte, error) {
	for i, o := range resp.GetOutputs() {
		if o.GetName() == name {
			data, err := outputData(resp, i)
			return o, data, err
		}
	}
	return nil, nil, fmt.Errorf("no output '%s' in the response", name)
}
