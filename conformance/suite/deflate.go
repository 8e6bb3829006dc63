package suite

import (
	"compress/zlib"
	"io"

	"google.golang.org/grpc/encoding"
)

// gRPC's deflate is zlib (RFC 1950), as gRPC's C core, and so Triton's clients (`-C deflate`),
// send it. grpc-go has no deflate of its own; the suite registers one for its client unless the
// process has one already (an embedding server's, which then stays in place).
func init() {
	if encoding.GetCompressor("deflate") == nil {
		encoding.RegisterCompressor(zlibCompressor{})
	}
}

type zlibCompressor struct{}

func (zlibCompressor) Name() string { return "deflate" }

func (zlibCompressor) Compress(w io.Writer) (io.WriteCloser, error) { return zlib.NewWriter(w), nil }

func (zlibCompressor) Decompress(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }
