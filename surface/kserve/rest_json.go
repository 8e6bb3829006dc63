package kserve

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// JSON plumbing of the REST protocol: the request envelope types, parameter conversion, and a
// protobuf-to-JSON writer that renders messages the way Triton's REST API does.

// jsonValue is a JSON value left undecoded. Unlike json.RawMessage it aliases the input instead
// of copying it: requests are decoded with json.Unmarshal from a body buffer that outlives the
// request, so tensor data is scanned once, in place, by the tensor codec.
type jsonValue []byte

func (v *jsonValue) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*v = nil // an explicit null counts as absent
		return nil
	}
	*v = b
	return nil
}

// restInferJSON is the JSON of an infer request (KServe v2 §2; Triton's binary extension adds the
// binary_data* parameters).
type restInferJSON struct {
	ID         string               `json:"id"`
	Parameters map[string]jsonValue `json:"parameters"`
	Inputs     []restInputJSON      `json:"inputs"`
	Outputs    []restOutputJSON     `json:"outputs"`
}

type restInputJSON struct {
	Name       string               `json:"name"`
	Shape      []int64              `json:"shape"`
	Datatype   string               `json:"datatype"`
	Parameters map[string]jsonValue `json:"parameters"`
	Data       jsonValue            `json:"data"`
}

type restOutputJSON struct {
	Name       string               `json:"name"`
	Parameters map[string]jsonValue `json:"parameters"`
}

// jsonSyntaxError turns an encoding/json failure into a 400 that says what is wrong and where.
func jsonSyntaxError(what string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalid("failed to parse %s: %v (at offset %d)", what, se, se.Offset)
	case errors.As(err, &te) && te.Field == "":
		return invalid("failed to parse %s: it must be a JSON %s, not a JSON %s", what, jsonKind(te.Type), te.Value)
	case errors.As(err, &te):
		return invalid("failed to parse %s: '%s' must be a JSON %s, not a JSON %s (at offset %d)", what, te.Field, jsonKind(te.Type), te.Value, te.Offset)
	}
	return invalid("failed to parse %s: %v", what, err)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.String()
}

// inferParameter converts a JSON parameter value as Triton's REST API does: a boolean is a
// bool_param, an integer an int64_param (a uint64_param past int64's range), any other number a
// double_param, a string a string_param. Objects, arrays and null have no InferParameter form.
func inferParameter(key string, v []byte) (*inference.InferParameter, error) {
	p := &inference.InferParameter{}
	switch {
	case len(v) == 0:
	case string(v) == "true" || string(v) == "false":
		p.ParameterChoice = &inference.InferParameter_BoolParam{BoolParam: v[0] == 't'}
		return p, nil
	case v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, invalid("failed to parse parameter '%s': %v", key, err)
		}
		p.ParameterChoice = &inference.InferParameter_StringParam{StringParam: s}
		return p, nil
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		s := string(v)
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: i}
			return p, nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: u}
			return p, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			p.ParameterChoice = &inference.InferParameter_DoubleParam{DoubleParam: f}
			return p, nil
		}
	}
	return nil, invalid("parameter '%s' has invalid type. It should be either 'int', 'bool', 'double', or 'string'.", key)
}

// boolParameter reads a parameter that must be a JSON boolean (binary_data, binary_data_output).
func boolParameter(key string, v jsonValue) (bool, error) {
	switch string(v) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, invalid("Unable to parse '%s': expected a boolean, got %s", key, clip(v))
}

// clip quotes a JSON value for an error message, shortened if long.
func clip(v []byte) string {
	if len(v) > 32 {
		return string(v[:32]) + "..."
	}
	return string(v)
}

// appendParameters writes InferParameters as a JSON object with sorted keys.
func appendParameters(dst []byte, params map[string]*inference.InferParameter, extra ...func([]byte) []byte) []byte {
	dst = append(dst, '{')
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	n := 0
	for _, k := range keys {
		v, ok := parameterValue(params[k])
		if !ok {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = tensor.AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	for _, f := range extra {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = f(dst)
	}
	return append(dst, '}')
}

// parameterValue is p as a JSON value; false for an empty parameter.
func parameterValue(p *inference.InferParameter) ([]byte, bool) {
	switch v := p.GetParameterChoice().(type) {
	case *inference.InferParameter_BoolParam:
		return strconv.AppendBool(nil, v.BoolParam), true
	case *inference.InferParameter_Int64Param:
		return strconv.AppendInt(nil, v.Int64Param, 10), true
	case *inference.InferParameter_Uint64Param:
		return strconv.AppendUint(nil, v.Uint64Param, 10), true
	case *inference.InferParameter_DoubleParam:
		return appendJSONFloat(nil, v.DoubleParam, 64), true
	case *inference.InferParameter_StringParam:
		return tensor.AppendJSONString(nil, v.StringParam), true
	}
	return nil, false
}

// appendJSONFloat writes a float, or proto JSON's strings for the values JSON numbers lack.
func appendJSONFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// appendProtoJSON writes m as Triton's REST API renders protobuf messages (it prints them with
// protobuf's JSON printer set to keep proto field names and print primitive fields even at their
// defaults, then turns 64-bit integers back into numbers): proto field names; every scalar, list
// and map field; unset message fields and oneof members left out; 64-bit integers as JSON
// numbers, not the strings proto3 JSON uses; enums by name. Map keys are sorted so the output is
// stable.
func appendProtoJSON(dst []byte, m protoreflect.Message) []byte {
	dst = append(dst, '{')
	fields := m.Descriptor().Fields()
	n := 0
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !m.Has(fd) {
			continue // unset oneof member or proto3 optional field
		}
		if fd.Message() != nil && fd.Cardinality() != protoreflect.Repeated && !m.Has(fd) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = tensor.AppendJSONString(dst, string(fd.Name()))
		dst = append(dst, ':')
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			dst = append(dst, '[')
			for j := range l.Len() {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendProtoValue(dst, fd, l.Get(j))
			}
			dst = append(dst, ']')
		case fd.IsMap():
			mp := v.Map()
			keys := make([]protoreflect.MapKey, 0, mp.Len())
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
				if a.String() < b.String() {
					return -1
				}
				if a.String() > b.String() {
					return 1
				}
				return 0
			})
			dst = append(dst, '{')
			for j, k := range keys {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = tensor.AppendJSONString(dst, k.String())
				dst = append(dst, ':')
				dst = appendProtoValue(dst, fd.MapValue(), mp.Get(k))
			}
			dst = append(dst, '}')
		default:
			dst = appendProtoValue(dst, fd, v)
		}
	}
	return append(dst, '}')
}

func appendProtoValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(dst, v.Bool())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(dst, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(dst, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendJSONFloat(dst, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendJSONFloat(dst, v.Float(), 64)
	case protoreflect.StringKind:
		return tensor.AppendJSONString(dst, v.String())
	case protoreflect.BytesKind:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes())
		return append(dst, '"')
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return tensor.AppendJSONString(dst, string(ev.Name()))
		}
		return strconv.AppendInt(dst, int64(v.Enum()), 10)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProtoJSON(dst, v.Message())
	}
	panic(fmt.Sprintf("kserve: unhandled protobuf kind %v", fd.Kind()))
}

// restError is an error with an HTTP status of its own, for failures outside the gRPC code space
// (a body over the size limit, a wrong method).
type restError struct {
	status int
	msg    string
	header http.Header // sent with the error (Retry-After)
}

func (e *restError) Error() string { return e.msg }

// restStatus maps an error to its HTTP status: a restError's own, else its code's (Triton's
// statuses, and the guard's refusals': httpapi.RESTStatus).
func restStatus(err error) int {
	var re *restError
	if errors.As(err, &re) {
		return re.status
	}
	return httpapi.RESTStatus(asStatus(err).Code())
}

// restMessage is the text of an error as the client sees it: the status message without
// connect's "code: " prefix.
func restMessage(err error) string {
	var re *restError
	if errors.As(err, &re) {
		return re.msg
	}
	return asStatus(err).Message()
}
