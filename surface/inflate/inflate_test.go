package inflate

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func gz(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestSpeed) // the tests' time goes to compressing
	_, err := zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

func zl(t testing.TB, data []byte) []byte {
	var b bytes.Buffer
	zw := zlib.NewWriter(&b)
	_, err := zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// text is data that compresses about as well as real payloads (JSON, tensors): a few times, not
// a thousand. A 64 KiB block of random words, repeated: gzip's 32 KiB window never sees the
// repeat.
func text(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"the ", "model ", "tensor ", "0.125, ", "42, ", "\"inputs\": ", "llama ", "gateway "}
	var block []byte
	for len(block) < 64<<10 {
		block = append(block, words[r.IntN(len(words))]...)
		block = append(block, byte('a'+r.IntN(26)))
	}
	return bytes.Repeat(block[:64<<10], n/(64<<10)+1)[:n]
}

func inflateAll(t testing.TB, in *Inflater, enc string, body []byte) ([]byte, error) {
	t.Helper()
	r, err := in.NewReader(enc, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func reason(err error) Reason {
	var ie *Error
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return -1
}

func TestReaderInflatesWithinBounds(t *testing.T) {
	t.Parallel()
	in := New(Config{MaxBytes: 2 << 20})
	data := text(3 << 19)
	for _, enc := range []string{"gzip", "x-gzip", "deflate"} {
		body := gz(t, data)
		if enc == "deflate" {
			body = zl(t, data)
		}
		out, err := inflateAll(t, in, enc, body)
		require.NoError(t, err, enc)
		assert.Equal(t, data, out, enc)
	}
	// Two gzip members are one body, as gzip -d reads them.
	out, err := inflateAll(t, in, "gzip", append(gz(t, []byte("ab")), gz(t, []byte("cd"))...))
	require.NoError(t, err)
	assert.Equal(t, "abcd", string(out))
	assert.Zero(t, in.budget.used.Load(), "closed readers gave their budget back")
}

// A body is refused at the byte that crosses MaxBytes, not after inflating the rest.
func TestReaderMaxBytes(t *testing.T) {
	t.Parallel()
	in := New(Config{MaxBytes: 1 << 20})
	out, err := inflateAll(t, in, "gzip", gz(t, text(1<<20)))
	require.NoError(t, err, "a body exactly at the bound")
	assert.Len(t, out, 1<<20)

	r, err := in.NewReader("gzip", bytes.NewReader(gz(t, text(2<<20))))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, r)
	assert.Equal(t, TooLarge, reason(err))
	assert.Equal(t, int64(1<<20)+1, r.Produced(), "stopped one byte past the bound")
	assert.EqualError(t, err, "request refused while decompressing: the request decompresses to more than 1048576 bytes (max_decompressed_bytes)")
	r.Close()
	var m dto.Metric
	require.NoError(t, in.refused.WithLabelValues("too_large").Write(&m))
	assert.Equal(t, 1.0, m.GetCounter().GetValue())
}

// A bomb (zeros inflate about 1000:1) is refused just past the first MiB; real data at the same
// size is not, and neither are small bodies of zeros.
func TestReaderRatio(t *testing.T) {
	t.Parallel()
	in := New(Config{})
	r, err := in.NewReader("gzip", bytes.NewReader(gz(t, make([]byte, 8<<20))))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, r)
	assert.Equal(t, TooDense, reason(err))
	assert.Less(t, r.Produced(), int64(2<<20), "refused soon after the first MiB")
	r.Close()

	_, err = inflateAll(t, in, "gzip", gz(t, text(3<<20)))
	assert.NoError(t, err)
	_, err = inflateAll(t, in, "gzip", gz(t, make([]byte, 1<<20)))
	assert.NoError(t, err, "a MiB of zeros is under the ratio's floor")
	_, err = inflateAll(t, New(Config{MaxRatio: -1}), "gzip", gz(t, make([]byte, 3<<20)))
	assert.NoError(t, err, "a negative MaxRatio turns the ratio bound off")
}

// The budget bounds what all readers hold together, and a closed reader gives its share back.
func TestReaderBudget(t *testing.T) {
	t.Parallel()
	in := New(Config{MaxBytes: 1 << 20, MaxInFlightBytes: 3 << 19})
	data := text(1 << 20)
	a, err := in.NewReader("gzip", bytes.NewReader(gz(t, data)))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, a)
	require.NoError(t, err)
	b, err := in.NewReader("gzip", bytes.NewReader(gz(t, data)))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, b)
	assert.Equal(t, Busy, reason(err), "1 + 1 MiB in flight past a 1.5 MiB budget")
	assert.Contains(t, err.Error(), "retry later")
	b.Close()
	a.Close()
	assert.Zero(t, in.budget.used.Load())
	out, err := inflateAll(t, in, "gzip", gz(t, data))
	require.NoError(t, err, "the budget is back")
	assert.Len(t, out, 1<<20)
}

func TestReaderCorrupt(t *testing.T) {
	t.Parallel()
	in := New(Config{})
	_, err := inflateAll(t, in, "gzip", []byte("not gzip at all"))
	assert.Equal(t, Corrupt, reason(err))
	assert.ErrorIs(t, err, gzip.ErrHeader)
	body := gz(t, text(100<<10))
	_, err = inflateAll(t, in, "gzip", body[:len(body)/2])
	assert.Equal(t, Corrupt, reason(err), "cut short")
	body[len(body)-5] ^= 0xff // the CRC
	_, err = inflateAll(t, in, "gzip", body)
	assert.Equal(t, Corrupt, reason(err), "bad checksum")
	_, err = inflateAll(t, in, "deflate", []byte{0x78, 0x9c, 0xff, 0xff})
	assert.Equal(t, Corrupt, reason(err))
	_, err = inflateAll(t, in, "gzip", nil)
	assert.Equal(t, Corrupt, reason(err), "an empty body is not a gzip stream")
	_, err = in.NewReader("br", bytes.NewReader(nil))
	assert.Error(t, err)
}

// A source's own error (a client gone away) is passed on as it is, not called corrupt data.
func TestReaderSourceError(t *testing.T) {
	t.Parallel()
	gone := errors.New("client went away")
	body := gz(t, text(1<<20))
	r, err := New(Config{}).NewReader("gzip", io.MultiReader(bytes.NewReader(body[:1000]), iotest{gone}))
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, r)
	assert.Same(t, gone, err)
}

type iotest struct{ err error }

func (e iotest) Read([]byte) (int, error) { return 0, e.err }

// envelope frames one message.
func envelope(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

func readEnvelopes(t testing.TB, in *Inflater, body []byte) ([]byte, error) {
	e := in.envelopes(bytes.NewReader(body), "gzip")
	defer e.Close()
	return io.ReadAll(e)
}

func TestEnvelopesRewriteCompressedMessages(t *testing.T) {
	t.Parallel()
	in := New(Config{MaxBytes: 1 << 20})
	plain, big := []byte("plain message"), text(600<<10)
	body := bytes.Join([][]byte{
		envelope(0, plain),
		envelope(1, gz(t, big)),
		envelope(0, nil),
		envelope(1, gz(t, []byte("small"))),
	}, nil)
	out, err := readEnvelopes(t, in, body)
	require.NoError(t, err)
	want := bytes.Join([][]byte{envelope(0, plain), envelope(0, big), envelope(0, nil), envelope(0, []byte("small"))}, nil)
	assert.Equal(t, want, out)
	assert.Zero(t, in.budget.used.Load())
}

// Each message is bounded on its own, and its budget is given back once the next one is read.
func TestEnvelopesBoundsEachMessage(t *testing.T) {
	t.Parallel()
	in := New(Config{MaxBytes: 256 << 10, MaxInFlightBytes: 256 << 10})
	msg := text(200 << 10)
	var body []byte
	for range 5 {
		body = append(body, envelope(1, gz(t, msg))...)
	}
	out, err := readEnvelopes(t, in, body)
	require.NoError(t, err, "five messages of 200 KiB through a 256 KiB budget, one at a time")
	assert.Len(t, out, 5*(5+len(msg)))

	_, err = readEnvelopes(t, in, append(envelope(0, []byte("ok")), envelope(1, gz(t, text(512<<10)))...))
	assert.Equal(t, TooLarge, reason(err))
	_, err = readEnvelopes(t, New(Config{}), envelope(1, gz(t, make([]byte, 4<<20))))
	assert.Equal(t, TooDense, reason(err), "a bomb")
}

func TestEnvelopesMalformed(t *testing.T) {
	t.Parallel()
	in := New(Config{})
	// A declared length past the bytes sent is not trusted with an allocation, and fails.
	huge := []byte{1, 0xff, 0xff, 0xff, 0xff}
	_, err := readEnvelopes(t, in, append(huge, gz(t, []byte("x"))[:10]...))
	assert.Equal(t, Corrupt, reason(err))
	// Bytes after the compressed stream, inside the message.
	_, err = readEnvelopes(t, New(Config{}), envelope(1, append(gz(t, []byte("x")), "junk"...)))
	assert.Equal(t, Corrupt, reason(err))
	// A partial header is passed on for the handler to report.
	out, err := readEnvelopes(t, in, []byte{0, 0, 1})
	require.NoError(t, err)
	assert.Equal(t, []byte{0, 0, 1}, out)
	// An uncompressed message cut short is an unexpected EOF.
	_, err = readEnvelopes(t, in, envelope(0, []byte("hello"))[:7])
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	assert.NoError(t, Config{}.Validate())
	assert.Error(t, Config{MaxBytes: 1 << 33}.Validate())
	assert.Error(t, Config{MaxBytes: 64 << 20, MaxInFlightBytes: 1 << 20}.Validate())
}

// A stream that sends one compressed message and goes quiet holds no budget once the handler has
// read that message.
func TestEnvelopesReleaseOnceRead(t *testing.T) {
	t.Parallel()
	in := New(Config{})
	msg := text(200 << 10)
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(envelope(1, gz(t, msg))) }() // and nothing more
	e := in.envelopes(pr, "gzip")
	defer e.Close()
	got := make([]byte, 5+len(msg))
	_, err := io.ReadFull(e, got)
	require.NoError(t, err)
	assert.Equal(t, envelope(0, msg), got)
	assert.Zero(t, in.budget.used.Load(), "the message was read whole: its budget is back while the stream idles")
}

// A goroutine the handler left behind (a stream's receiver) may still be reading when the Handler
// is done: the decompressor stays its own until that read ends, and is released then, never
// pooled under it (run with -race).
func TestHandlerReaderOutlivesHandler(t *testing.T) {
	t.Parallel()
	in := New(Config{})
	pr, pw := io.Pipe()
	reading := make(chan struct{})
	read := make(chan []byte)
	h := in.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		go func() {
			buf := make([]byte, 64<<10)
			n, err := r.Body.Read(buf) // in progress when the Handler is done
			assert.NoError(t, err)
			_, err = r.Body.Read(buf[n:])
			assert.ErrorIs(t, err, errClosed, "the Handler is done: no more reads")
			read <- buf[:n]
		}()
		<-reading
	}))
	// The body says when the read has reached it: the read is then in progress for sure (a
	// signal sent before calling Read could let the Handler return before the read began).
	body := &signalReader{r: pr, reading: reading}
	req := httptest.NewRequest(http.MethodPost, "/inference.GRPCInferenceService/ModelStreamInfer", body)
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	req.Header.Set("Grpc-Encoding", "gzip")
	h.ServeHTTP(httptest.NewRecorder(), req) // returns while its goroutine waits in Read
	msg := text(100 << 10)
	go func() { _, _ = pw.Write(envelope(1, gz(t, msg))) }()
	got := <-read
	assert.Equal(t, envelope(0, msg)[:len(got)], got, "the read in progress inflated its message")
	assert.Zero(t, in.budget.used.Load(), "released by the read that outlived the Handler")
}

// signalReader closes reading when its first Read begins.
type signalReader struct {
	r       io.Reader
	reading chan struct{}
	once    sync.Once
}

func (s *signalReader) Read(p []byte) (int, error) {
	s.once.Do(func() { close(s.reading) })
	return s.r.Read(p)
}
