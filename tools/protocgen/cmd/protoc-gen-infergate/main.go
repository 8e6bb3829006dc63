// Command protoc-gen-infergate is the protoc/buf plugin that turns tensor-annotated proto services
// into infergate models (see package protocgen). Use it from buf.gen.yaml as a local plugin, next
// to protoc-gen-go, protoc-gen-go-grpc and protoc-gen-connect-go (opt simple), all with the same
// out and paths options:
//
//   - local: ["go", "run", "github.com/infergate/infergate/tools/protocgen/cmd/protoc-gen-infergate"]
//     out: gen
//     opt: paths=source_relative
package main

import (
	"github.com/infergate/infergate/tools/protocgen"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/types/pluginpb"
)

func main() {
	protogen.Options{}.Run(func(p *protogen.Plugin) error {
		p.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)
		return protocgen.Generate(p)
	})
}
