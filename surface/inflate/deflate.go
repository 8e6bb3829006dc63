package inflate

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"io"
	"reflect"
	"runtime"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/grpc/encoding"
)

// deflateName is gRPC's "deflate" message encoding: the zlib format (RFC 1950), which gRPC's C core,
// and so Triton's C++ and Python clients, send for `-C deflate`, as HTTP's deflate coding is.
const deflateName = "deflate"

// grpc-go looks compressors up by name in one registry per process, filled at init time; gzip is
// there once grpc-go's encoding/gzip is imported. Registering deflate here makes every grpc-go
// server and client in the process accept and answer it.
func init() { encoding.RegisterCompressor(&deflateCompressor{}) }

// deflateCompressor is grpc-go's deflate: compress/zlib's writer and reader, pooled. On a server
// whose services were registered through a GRPC's Registrar, a message being read is passed on
// marked instead (see decompressing), so that the call inflates it within its server's bounds.
type deflateCompressor struct {
	writers, readers sync.Pool
}

func (*deflateCompressor) Name() string { return deflateName }

func (c *deflateCompressor) Compress(w io.Writer) (io.WriteCloser, error) {
	zw, ok := c.writers.Get().(*zlib.Writer)
	if !ok {
		// Level 1: responses are compressed on the request path, where time costs more than
		// the few percent of size a higher level saves; gRPC's C core defaults to zlib's 6.
		zw, _ = zlib.NewWriterLevel(w, flate.BestSpeed)
	} else {
		zw.Reset(w)
	}
	return &pooledWriter{Writer: zw, pool: &c.writers}, nil
}

type pooledWriter struct {
	*zlib.Writer
	pool *sync.Pool
}

func (w *pooledWriter) Close() error {
	err := w.Writer.Close()
	w.pool.Put(w.Writer)
	return err
}

func (c *deflateCompressor) Decompress(r io.Reader) (io.Reader, error) {
	if decompressing() {
		return io.MultiReader(bytes.NewReader(deferredDeflate), r), nil
	}
	zr, ok := c.readers.Get().(io.ReadCloser)
	if ok {
		if err := zr.(zlib.Resetter).Reset(r, nil); err != nil {
			c.readers.Put(zr)
			return nil, err
		}
	} else {
		var err error
		if zr, err = zlib.NewReader(r); err != nil {
			return nil, err
		}
	}
	return &pooledReader{zr: zr, pool: &c.readers}, nil
}

// pooledReader returns its reader to the pool when closed (grpc-go closes the reader once it has
// read the message).
type pooledReader struct {
	zr   io.ReadCloser
	pool *sync.Pool
}

func (r *pooledReader) Read(p []byte) (int, error) {
	if r.zr == nil {
		return 0, errClosed
	}
	return r.zr.Read(p)
}

func (r *pooledReader) Close() error {
	if r.zr != nil {
		r.pool.Put(r.zr)
		r.zr = nil
	}
	return nil
}

// receiveDeferring reads v with r; a deflate message it decompresses is passed on marked. The
// mark is this function on the goroutine's stack: grpc-go decompresses in the goroutine that
// reads the message and gives its compressor nothing else to tell a server's read from a
// client's.
//
//go:noinline
func receiveDeferring(r receiver, v any) error { return r.RecvMsg(v) }

// receiver reads one message: a grpc.ServerStream, or a unary call's decoding function as a
// recvFunc (an interface, not a method value, so a stream's read allocates no closure).
type receiver interface{ RecvMsg(any) error }

type recvFunc func(any) error

func (f recvFunc) RecvMsg(v any) error { return f(v) }

var receiveDeferringEntry = reflect.ValueOf(receiveDeferring).Pointer()

// maxReceiveDepth is how far up the stack decompressing looks: grpc-go's read path is about six
// frames, and each stream interceptor that wraps the stream adds one.
const maxReceiveDepth = 64

// decompressing reports whether the caller runs inside receiveDeferring.
func decompressing() bool {
	var pcs [maxReceiveDepth]uintptr
	n := runtime.Callers(3, pcs[:])
	for _, pc := range pcs[:n] {
		if f := runtime.FuncForPC(pc - 1); f != nil && f.Entry() == receiveDeferringEntry {
			return true
		}
	}
	return false
}

// ConnectCompression is deflate for connect-go handlers (connect.WithCompression), so that they
// answer in deflate clients that accept it. Compressed requests reach handlers already inflated
// by Handler; a request Handler does not see (a Connect GET's compressed query) inflates here,
// within the same bounds.
func (in *Inflater) ConnectCompression() connect.HandlerOption {
	return connect.WithCompression(deflateName,
		func() connect.Decompressor { return &connectDecompressor{in: in} },
		func() connect.Compressor {
			zw, _ := zlib.NewWriterLevel(io.Discard, flate.BestSpeed)
			return zw
		})
}

// connectDecompressor is a Reader behind connect-go's Decompressor interface.
type connectDecompressor struct {
	in *Inflater
	r  *Reader
}

func (d *connectDecompressor) Reset(src io.Reader) error {
	if d.r != nil {
		d.r.Close()
		d.r = nil
	}
	r, err := d.in.NewReader(deflateName, src)
	if err != nil {
		return connectError(err)
	}
	d.r = r
	return nil
}

func (d *connectDecompressor) Read(p []byte) (int, error) {
	if d.r == nil {
		return 0, io.EOF
	}
	n, err := d.r.Read(p)
	if err != nil && err != io.EOF {
		err = connectError(err)
	}
	return n, err
}

func (d *connectDecompressor) Close() error {
	if d.r != nil {
		d.r.Close()
		d.r = nil
	}
	return nil
}
