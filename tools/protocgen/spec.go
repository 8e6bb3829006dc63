package protocgen

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// datatype is a KServe datatype as the plugin knows it: its wire name, the inference.DataType
// constant generated code uses, and its element size (0 for BYTES).
type datatype struct {
	name, enum string
	size       int
}

var datatypes = []datatype{
	{"BOOL", "DataType_TYPE_BOOL", 1},
	{"UINT8", "DataType_TYPE_UINT8", 1},
	{"UINT16", "DataType_TYPE_UINT16", 2},
	{"UINT32", "DataType_TYPE_UINT32", 4},
	{"UINT64", "DataType_TYPE_UINT64", 8},
	{"INT8", "DataType_TYPE_INT8", 1},
	{"INT16", "DataType_TYPE_INT16", 2},
	{"INT32", "DataType_TYPE_INT32", 4},
	{"INT64", "DataType_TYPE_INT64", 8},
	{"FP16", "DataType_TYPE_FP16", 2},
	{"FP32", "DataType_TYPE_FP32", 4},
	{"FP64", "DataType_TYPE_FP64", 8},
	{"BYTES", "DataType_TYPE_STRING", 0},
	{"BF16", "DataType_TYPE_BF16", 2},
}

func lookupDatatype(name string) (datatype, bool) {
	for _, d := range datatypes {
		if d.name == name {
			return d, true
		}
	}
	return datatype{}, false
}

// holder is how a Go field holds a tensor, which decides the conversion generated for it.
type holder int

const (
	holdView   holder = iota // []T viewing the raw bytes in place (4- and 8-byte numbers)
	holdWiden                // []int32/[]uint32 holding INT8/INT16/UINT8/UINT16 (converted)
	holdBool                 // []bool
	holdBytes                // [][]byte, one BYTES element each (subslices, no copy)
	holdString               // []string, one BYTES element each (copies)
	holdRaw                  // bytes: the raw little-endian data of any fixed-size datatype
)

// Sequence control kinds, as numbered in tensor.proto's SequenceControl.
const (
	controlNone = iota
	controlStart
	controlEnd
	controlReady
	controlCorrID
)

var controlEnums = [...]string{
	controlStart:  "ModelSequenceBatching_Control_CONTROL_SEQUENCE_START",
	controlEnd:    "ModelSequenceBatching_Control_CONTROL_SEQUENCE_END",
	controlReady:  "ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY",
	controlCorrID: "ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID",
}

// tensorSpec is one annotated field.
type tensorSpec struct {
	field      *protogen.Field
	name       string
	dt         datatype
	hold       holder
	goElem     string // element type for holdView/holdWiden ("int32", "float32", ...)
	wireElem   string // element type of the wire datatype for holdWiden ("int8", ...)
	shape      []int64
	optional   bool
	shapeField *protogen.Field
	control    int
}

// messageSpec is a request or response message: its tensors in field order.
type messageSpec struct {
	msg      *protogen.Message
	tensors  []*tensorSpec
	controls []*tensorSpec // request only
}

// modelSpec is one RPC served as one model.
type modelSpec struct {
	method            *protogen.Method
	name              string
	maxBatch          int32
	decoupled         bool
	platform, backend string
	sequence          bool
	sequenceIdle      uint64
	in, out           *messageSpec
}

// serviceSpec is an annotated service.
type serviceSpec struct {
	service *protogen.Service
	models  []*modelSpec
}

// fileSpec is everything to generate for one file.
type fileSpec struct {
	file     *protogen.File
	services []*serviceSpec
	messages []*messageSpec // distinct request and response messages, in first-use order
}

// specError is a bad annotation: where it is and what is wrong.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

func errorf(format string, args ...any) error { return &specError{fmt.Sprintf(format, args...)} }

// at prefixes a problem with the file, line and element it is about, as compilers do.
func at(file *protogen.File, d protoreflect.Descriptor, what string, format string, args ...any) error {
	loc := file.Desc.SourceLocations().ByDescriptor(d)
	pos := file.Desc.Path()
	if loc.Path != nil {
		pos = fmt.Sprintf("%s:%d:%d", pos, loc.StartLine+1, loc.StartColumn+1)
	}
	return errorf("%s: %s %s: %s", pos, what, d.FullName(), fmt.Sprintf(format, args...))
}

// buildFile reads the annotations of f into a fileSpec, or returns every problem found.
func buildFile(f *protogen.File, o *options) (*fileSpec, error) {
	fs := &fileSpec{file: f}
	var errs []error
	msgs := map[*protogen.Message]*messageSpec{}
	names := map[string]*protogen.Method{}
	for _, svc := range f.Services {
		sopt := o.get(svc.Desc.Options(), o.model)
		annotated := sopt != nil
		for _, m := range svc.Methods {
			if o.get(m.Desc.Options(), o.mmodel) != nil {
				annotated = true
			}
		}
		if !annotated {
			continue
		}
		ss := &serviceSpec{service: svc}
		for _, m := range svc.Methods {
			ms, err := buildModel(f, o, svc, sopt, m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if prev, ok := names[ms.name]; ok {
				errs = append(errs, at(f, m.Desc, "rpc", "model name %q is already used by %s", ms.name, prev.Desc.FullName()))
				continue
			}
			names[ms.name] = m
			for _, part := range []struct {
				msg  *protogen.Message
				dst  **messageSpec
				resp bool
			}{{m.Input, &ms.in, false}, {m.Output, &ms.out, true}} {
				if spec, ok := msgs[part.msg]; ok {
					*part.dst = spec
					continue
				}
				spec, err := buildMessage(f, o, part.msg, part.resp)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				msgs[part.msg] = spec
				fs.messages = append(fs.messages, spec)
				*part.dst = spec
			}
			if ms.in == nil || ms.out == nil {
				continue
			}
			if err := checkModel(f, ms); err != nil {
				errs = append(errs, err)
				continue
			}
			ss.models = append(ss.models, ms)
		}
		fs.services = append(fs.services, ss)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return fs, nil
}

func buildModel(f *protogen.File, o *options, svc *protogen.Service, sopt protoreflect.Message, m *protogen.Method) (*modelSpec, error) {
	opt := o.get(m.Desc.Options(), o.mmodel)
	if opt == nil {
		opt = sopt
	}
	if opt == nil {
		return nil, at(f, m.Desc, "rpc", "has no (infergate.tensor.v1.method_model) option, and its service's (infergate.tensor.v1.model) is missing")
	}
	ms := &modelSpec{
		method:    m,
		name:      str(opt, "name"),
		maxBatch:  int32(i64(opt, "max_batch_size")),
		decoupled: boolean(opt, "decoupled") || m.Desc.IsStreamingServer(),
		platform:  str(opt, "platform"),
		backend:   str(opt, "backend"),
	}
	if seq := msg(opt, "sequence"); seq != nil {
		ms.sequence = true
		ms.sequenceIdle = u64(seq, "max_idle_microseconds")
	}
	if ms.platform == "" {
		ms.platform = "infergate_go"
	}
	if ms.backend == "" {
		ms.backend = "go"
	}
	switch {
	case m.Desc.IsStreamingClient():
		return nil, at(f, m.Desc, "rpc", "is client-streaming; a model takes one request (use a unary or server-streaming RPC)")
	case ms.name == "":
		return nil, at(f, m.Desc, "rpc", "model has no name (set name in the (infergate.tensor.v1.model) option)")
	case len(svc.Methods) > 1 && o.get(m.Desc.Options(), o.mmodel) == nil:
		return nil, at(f, m.Desc, "rpc", "service has %d RPCs, so each needs its own (infergate.tensor.v1.method_model) option naming its model", len(svc.Methods))
	case ms.maxBatch < 0:
		return nil, at(f, m.Desc, "rpc", "max_batch_size %d is negative", ms.maxBatch)
	}
	return ms, nil
}

// buildMessage reads the tensor annotations of a request (resp false) or response message.
func buildMessage(f *protogen.File, o *options, m *protogen.Message, resp bool) (*messageSpec, error) {
	spec := &messageSpec{msg: m}
	var errs []error
	shapeOf := map[*protogen.Field]*tensorSpec{}
	named := map[*protogen.Field]bool{} // named by a shape_field, valid or not: reported once
	byName := map[string]*protogen.Field{}
	for _, fld := range m.Fields {
		opt := o.get(fld.Desc.Options(), o.tensor)
		if opt == nil {
			continue
		}
		t, err := buildTensor(f, fld, opt, resp)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, ok := byName[t.name]; ok {
			errs = append(errs, at(f, fld.Desc, "field", "tensor name %q is already used by field %s", t.name, prev.Desc.Name()))
			continue
		}
		byName[t.name] = fld
		if sf := str(opt, "shape_field"); sf != "" {
			var target *protogen.Field
			for _, g := range m.Fields {
				if string(g.Desc.Name()) == sf {
					target = g
				}
			}
			named[target] = true
			switch {
			case target == nil:
				errs = append(errs, at(f, fld.Desc, "field", "shape_field %q names no field of %s", sf, m.Desc.Name()))
				continue
			case !target.Desc.IsList() || target.Desc.Kind() != protoreflect.Int64Kind:
				errs = append(errs, at(f, fld.Desc, "field", "shape_field %q must be a repeated int64 field", sf))
				continue
			case o.get(target.Desc.Options(), o.tensor) != nil:
				errs = append(errs, at(f, fld.Desc, "field", "shape_field %q is itself a tensor", sf))
				continue
			case shapeOf[target] != nil:
				errs = append(errs, at(f, fld.Desc, "field", "shape_field %q already holds the shape of tensor %q", sf, shapeOf[target].name))
				continue
			}
			shapeOf[target] = t
			t.shapeField = target
		}
		if t.control != controlNone {
			spec.controls = append(spec.controls, t)
		} else {
			spec.tensors = append(spec.tensors, t)
		}
	}
	for _, fld := range m.Fields {
		if o.get(fld.Desc.Options(), o.tensor) == nil && !named[fld] {
			errs = append(errs, at(f, fld.Desc, "field", "has no (infergate.tensor.v1.tensor) option; every field of a model's request and response is a tensor or a tensor's shape_field"))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return spec, nil
}

func buildTensor(f *protogen.File, fld *protogen.Field, opt protoreflect.Message, resp bool) (*tensorSpec, error) {
	fd := fld.Desc
	t := &tensorSpec{
		field:    fld,
		name:     str(opt, "name"),
		shape:    i64s(opt, "shape"),
		optional: boolean(opt, "optional"),
		control:  int(enum(opt, "control")),
	}
	if t.name == "" {
		t.name = string(fd.Name())
	}
	bad := func(format string, args ...any) error { return at(f, fd, "field", format, args...) }
	if fd.IsMap() {
		return nil, bad("is a map; a tensor field is repeated scalars or bytes")
	}
	// The datatypes each field type can hold; the first is the default.
	var allowed []string
	kind := fd.Kind()
	switch {
	case !fd.IsList() && kind == protoreflect.BytesKind:
		t.hold = holdRaw
		for _, d := range datatypes {
			if d.size > 0 {
				allowed = append(allowed, d.name)
			}
		}
	case !fd.IsList():
		return nil, bad("is not repeated; a tensor is a flat list of elements (use repeated %s, or bytes for raw data)", kind)
	case kind == protoreflect.BoolKind:
		allowed, t.hold = []string{"BOOL"}, holdBool
	case kind == protoreflect.Int32Kind || kind == protoreflect.Sint32Kind || kind == protoreflect.Sfixed32Kind:
		allowed, t.goElem = []string{"INT32", "INT16", "INT8"}, "int32"
	case kind == protoreflect.Uint32Kind || kind == protoreflect.Fixed32Kind:
		allowed, t.goElem = []string{"UINT32", "UINT16", "UINT8"}, "uint32"
	case kind == protoreflect.Int64Kind || kind == protoreflect.Sint64Kind || kind == protoreflect.Sfixed64Kind:
		allowed, t.goElem = []string{"INT64"}, "int64"
	case kind == protoreflect.Uint64Kind || kind == protoreflect.Fixed64Kind:
		allowed, t.goElem = []string{"UINT64"}, "uint64"
	case kind == protoreflect.FloatKind:
		allowed, t.goElem = []string{"FP32"}, "float32"
	case kind == protoreflect.DoubleKind:
		allowed, t.goElem = []string{"FP64"}, "float64"
	case kind == protoreflect.BytesKind:
		allowed, t.hold = []string{"BYTES"}, holdBytes
	case kind == protoreflect.StringKind:
		allowed, t.hold = []string{"BYTES"}, holdString
	default:
		return nil, bad("has type %s, which holds no tensor datatype (use repeated scalars, or bytes)", kind)
	}
	want := str(opt, "datatype")
	if want == "" {
		if t.hold == holdRaw {
			return nil, bad("is bytes, which holds raw tensor data: set datatype (one of %s)", strings.Join(allowed, ", "))
		}
		want = allowed[0]
	}
	dt, ok := lookupDatatype(want)
	if !ok {
		return nil, bad("unknown datatype %q (KServe datatypes: BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES, BF16)", want)
	}
	fits := false
	for _, a := range allowed {
		fits = fits || a == want
	}
	if !fits {
		label := kind.String()
		if fd.IsList() {
			label = "repeated " + label
		}
		return nil, bad("a %s field cannot hold datatype %s (it holds %s)", label, want, strings.Join(allowed, ", "))
	}
	t.dt = dt
	if t.goElem != "" && dt.size < 4 {
		t.hold = holdWiden
		t.wireElem = map[string]string{"INT8": "int8", "INT16": "int16", "UINT8": "uint8", "UINT16": "uint16"}[dt.name]
	}

	if t.control != controlNone {
		if resp {
			return nil, bad("is a sequence control, which only a request message can have")
		}
		if len(t.shape) > 0 || t.optional {
			return nil, bad("is a sequence control: the server fills it, so it takes no shape or optional")
		}
		okType := (t.hold == holdBool) || (t.hold == holdView && t.goElem == "int32")
		if t.control == controlCorrID {
			okType = (t.hold == holdView && t.goElem == "uint64") || t.hold == holdString
		}
		if !okType {
			if t.control == controlCorrID {
				return nil, bad("is a CORRID control, which is repeated uint64 or repeated string")
			}
			return nil, bad("is a START, END or READY control, which is repeated bool or repeated int32")
		}
		return t, nil
	}
	if len(t.shape) == 0 {
		return nil, bad("tensor %q has no shape (set shape, -1 for a variable dimension)", t.name)
	}
	for _, d := range t.shape {
		if d < -1 {
			return nil, bad("tensor %q has dimension %d; dimensions are >= 0, or -1 for variable", t.name, d)
		}
	}
	if resp && t.optional {
		return nil, bad("is an output; only inputs can be optional")
	}
	return t, nil
}

// checkModel checks what depends on the model as well as its messages: the batch dimension,
// sequence controls and output shapes that cannot be inferred.
func checkModel(f *protogen.File, ms *modelSpec) error {
	var errs []error
	for _, part := range []*messageSpec{ms.in, ms.out} {
		for _, t := range part.tensors {
			if ms.maxBatch > 0 && (len(t.shape) < 2 || t.shape[0] != -1) {
				errs = append(errs, at(f, t.field.Desc, "field",
					"tensor %q has shape %v, but model %q batches (max_batch_size %d): its shape must start with the batch dimension -1, then at least one more",
					t.name, t.shape, ms.name, ms.maxBatch))
			}
		}
	}
	for _, t := range ms.out.tensors {
		variable := 0
		for _, d := range t.shape {
			if d < 0 {
				variable++
			}
		}
		if variable > 1 && t.shapeField == nil {
			errs = append(errs, at(f, t.field.Desc, "field",
				"output %q has %d variable dimensions, so its shape cannot be inferred from its length: set shape_field", t.name, variable))
		}
	}
	if len(ms.in.controls) > 0 && !ms.sequence {
		errs = append(errs, at(f, ms.in.controls[0].field.Desc, "field",
			"is a sequence control, but model %q has no sequence option", ms.name))
	}
	seen := map[int]bool{}
	for _, c := range ms.in.controls {
		if seen[c.control] {
			errs = append(errs, at(f, c.field.Desc, "field", "repeats a sequence control kind already declared"))
		}
		seen[c.control] = true
	}
	if len(ms.out.tensors) == 0 {
		errs = append(errs, at(f, ms.method.Desc, "rpc", "response %s has no tensor fields; a model has at least one output", ms.out.msg.Desc.Name()))
	}
	return errors.Join(errs...)
}
