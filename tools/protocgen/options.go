package protocgen

import (
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// OptionsFile is the proto file that declares the options this plugin reads.
const OptionsFile = "infergate/tensor/v1/tensor.proto"

// options reads the tensor and model options from descriptors. It builds their extension types
// from the request's own copy of tensor.proto instead of importing the generated Go package,
// because buf's `clean: true` deletes gen/ before the plugin is compiled by `go run`.
type options struct {
	types                 *protoregistry.Types
	tensor, model, mmodel protoreflect.ExtensionType
}

func newOptions(f *protogen.File) (*options, error) {
	o := &options{types: new(protoregistry.Types)}
	for _, x := range []struct {
		name string
		dst  *protoreflect.ExtensionType
	}{{"tensor", &o.tensor}, {"model", &o.model}, {"method_model", &o.mmodel}} {
		xd := f.Desc.Extensions().ByName(protoreflect.Name(x.name))
		if xd == nil {
			return nil, errorf("%s declares no extension %q", OptionsFile, x.name)
		}
		*x.dst = dynamicpb.NewExtensionType(xd)
		if err := o.types.RegisterExtension(*x.dst); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// get returns the value of extension xt in opts (a descriptor's options message), or nil. The
// options are re-parsed with our resolver, so it works whether or not the extension was known
// when the request was decoded.
func (o *options) get(opts proto.Message, xt protoreflect.ExtensionType) protoreflect.Message {
	if opts == nil || !opts.ProtoReflect().IsValid() {
		return nil
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(opts)
	if err != nil {
		return nil
	}
	fresh := opts.ProtoReflect().New().Interface()
	if err := (proto.UnmarshalOptions{Resolver: o.types}).Unmarshal(b, fresh); err != nil {
		return nil
	}
	m := fresh.ProtoReflect()
	xd := xt.TypeDescriptor()
	if !m.Has(xd) {
		return nil
	}
	return m.Get(xd).Message()
}

// Accessors for fields of dynamic option messages, by proto name.

func str(m protoreflect.Message, name string) string {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).String()
}

func boolean(m protoreflect.Message, name string) bool {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).Bool()
}

func i64(m protoreflect.Message, name string) int64 {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).Int()
}

func u64(m protoreflect.Message, name string) uint64 {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).Uint()
}

func enum(m protoreflect.Message, name string) protoreflect.EnumNumber {
	return m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).Enum()
}

func i64s(m protoreflect.Message, name string) []int64 {
	l := m.Get(m.Descriptor().Fields().ByName(protoreflect.Name(name))).List()
	out := make([]int64, l.Len())
	for i := range out {
		out[i] = l.Get(i).Int()
	}
	return out
}

func msg(m protoreflect.Message, name string) protoreflect.Message {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
	if !m.Has(fd) {
		return nil
	}
	return m.Get(fd).Message()
}
