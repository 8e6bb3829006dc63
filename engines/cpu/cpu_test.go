package cpu_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/cpu"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite testdata/*.textproto from the built-in models")

// The built-ins' ModelConfig and ModelMetadata are Triton-compatible contracts: testdata holds
// them as the hand-written models declared them, and every built-in, whether hand-written or
// generated from schema/infergate/builtin, must match them exactly (proto.Equal), in the same
// registration order.
func TestBuiltinConfigsAndMetadataUnchanged(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, cpu.Register(reg))
	var names []string
	for _, e := range reg.Entries() {
		names = append(names, e.Name())
		for _, part := range []struct {
			kind string
			msg  proto.Message
			want proto.Message
		}{
			{"config", e.Config(), new(inference.ModelConfig)},
			{"metadata", e.Metadata(), new(inference.ModelMetadataResponse)},
		} {
			path := filepath.Join("testdata", e.Name()+"."+part.kind+".textproto")
			if *update {
				b, err := prototext.MarshalOptions{Multiline: true}.Marshal(part.msg)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, b, 0o644))
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, prototext.Unmarshal(b, part.want))
			require.True(t, proto.Equal(part.want, part.msg), "%s %s differs from %s:\n got %v\nwant %v", e.Name(), part.kind, path, part.msg, part.want)
		}
	}
	require.Equal(t, []string{"simple", "simple_int8", "simple_string", "simple_identity", "simple_sequence",
		"simple_dyna_sequence", "repeat_int32", "square_int32", "identity_fp32"}, names)
}
