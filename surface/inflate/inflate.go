// Package inflate decompresses the request bodies untrusted clients send, with its bounds applied
// while inflating, never after: a body may inflate to at most MaxBytes, and once past its first
// MiB to at most MaxRatio times the compressed bytes read so far; and every body being inflated
// spends from one budget shared by all requests, so a flood of small compressed requests cannot
// make the server hold more than a bounded amount of inflated bytes at once. A body that crosses
// a bound is refused as the byte that crosses it is produced, so a 1 MB body that would inflate
// to 1 GiB costs at most the bound, not the gibibyte.
//
// It covers every transport the gateway serves, for gzip and deflate alike: Content-Encoding
// bodies (HTTP), per-message compression inside gRPC, gRPC-Web and Connect envelopes (Handler),
// and grpc-go's native transport (GRPC). The standard library's decompressors do the inflating;
// what no library offers is the bounds and the budget around them, so those are written here.
// Importing the package registers gRPC's deflate with grpc-go (deflate.go).
package inflate

import (
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults.
const (
	// DefaultMaxBytes is the most one compressed body (or message) may inflate to: twice the
	// 32 MiB tensors most models take, well under what one request can cost uncompressed.
	DefaultMaxBytes = 64 << 20
	// DefaultMaxRatio is Apache mod_deflate's DeflateInflateRatioLimit: real data (tensors,
	// JSON) compresses far less than 200:1; bombs compress about 1000:1.
	DefaultMaxRatio = 200
	// DefaultMaxInFlightBytes bounds the inflated bytes of all requests together.
	DefaultMaxInFlightBytes = 1 << 30
	// ratioFloor is how far a body may inflate before the ratio bound applies, so that small,
	// very compressible bodies (a few KiB of zeros) are never refused.
	ratioFloor = 1 << 20
	// chargeStep is how many bytes are taken from the budget at a time, so a body spends one
	// atomic operation per 256 KiB, not one per read.
	chargeStep = 256 << 10
)

// Config bounds decompression. Zero values take the defaults.
type Config struct {
	// MaxBytes is the most one compressed body or message may inflate to.
	MaxBytes int64
	// MaxRatio is the most a body may inflate per compressed byte, once past its first MiB.
	// Negative: no ratio bound.
	MaxRatio int64
	// MaxInFlightBytes is the budget all requests' inflated bytes share.
	MaxInFlightBytes int64
}

// Inflater decompresses bodies within one server's bounds. It is safe for concurrent use.
type Inflater struct {
	maxBytes, maxRatio int64
	budget             *budget
	refused            *prometheus.CounterVec
	gzips, zlibs       sync.Pool
}

func (cfg Config) withDefaults() Config {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.MaxRatio == 0 {
		cfg.MaxRatio = DefaultMaxRatio
	}
	if cfg.MaxInFlightBytes == 0 {
		cfg.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	return cfg
}

// Validate reports bounds that cannot work: a message bound outside what a gRPC message can be,
// or a budget that cannot hold one body at the bound.
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	switch {
	case cfg.MaxBytes < 0 || cfg.MaxBytes > math.MaxUint32:
		return fmt.Errorf("max_decompressed_bytes must be between 1 and %d (a gRPC message's limit), not %d", uint32(math.MaxUint32), cfg.MaxBytes)
	case cfg.MaxInFlightBytes < cfg.MaxBytes:
		return fmt.Errorf("max_decompression_in_flight_bytes (%d) must hold at least one body of max_decompressed_bytes (%d)", cfg.MaxInFlightBytes, cfg.MaxBytes)
	}
	return nil
}

// New returns an Inflater with cfg's bounds; bounds Validate refuses are brought within range.
func New(cfg Config) *Inflater {
	cfg = cfg.withDefaults()
	cfg.MaxBytes = min(max(cfg.MaxBytes, 1), math.MaxUint32)
	cfg.MaxInFlightBytes = max(cfg.MaxInFlightBytes, cfg.MaxBytes)
	return &Inflater{maxBytes: cfg.MaxBytes, maxRatio: cfg.MaxRatio, budget: &budget{limit: cfg.MaxInFlightBytes},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_decompression_refusals_total",
			Help: "Compressed request bodies refused while inflating, by reason: too_large (max_decompressed_bytes), ratio (max_decompression_ratio), busy (the in-flight budget was spent).",
		}, []string{"reason"})}
}

// MaxBytes is the most one body may inflate to.
func (in *Inflater) MaxBytes() int64 { return in.maxBytes }

// Collectors are the Inflater's metrics.
func (in *Inflater) Collectors() []prometheus.Collector {
	return []prometheus.Collector{in.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "infergate_decompressed_bytes_in_flight",
			Help: "Inflated request bytes held by requests now, against the max_decompression_in_flight_bytes budget.",
		}, func() float64 { return float64(in.budget.used.Load()) })}
}

// Reason says why a body was refused.
type Reason int

const (
	// TooLarge: the body inflates past MaxBytes.
	TooLarge Reason = iota
	// TooDense: the body inflates past MaxRatio times its compressed size.
	TooDense
	// Busy: the budget shared by all requests is spent; the body may succeed later.
	Busy
	// Corrupt: the compressed data is not valid.
	Corrupt
)

// Error is a body refused while inflating.
type Error struct {
	Reason Reason
	Limit  int64
	Err    error // the decompressor's, for Corrupt
}

func (e *Error) Error() string {
	switch e.Reason {
	case TooLarge:
		return fmt.Sprintf("%sthe request decompresses to more than %d bytes (max_decompressed_bytes)", marker, e.Limit)
	case TooDense:
		return fmt.Sprintf("%sthe request decompresses to more than %d times its compressed size (max_decompression_ratio)", marker, e.Limit)
	case Busy:
		return fmt.Sprintf("%sthe server is decompressing %d bytes of other requests, its limit (max_decompression_in_flight_bytes); retry later", marker, e.Limit)
	}
	return fmt.Sprintf("%scorrupt compressed data: %v", marker, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// marker starts every Error's message.
const marker = "request refused while decompressing: "

var reasonLabels = [...]string{TooLarge: "too_large", TooDense: "ratio", Busy: "busy"}

func (in *Inflater) refuse(r Reason, limit int64) *Error {
	if int(r) < len(reasonLabels) {
		in.refused.WithLabelValues(reasonLabels[r]).Inc()
	}
	return &Error{Reason: r, Limit: limit}
}

// budget is the inflated bytes all requests hold, against a limit.
type budget struct {
	limit int64
	used  atomic.Int64
}

func (b *budget) take(n int64) bool {
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// Supported reports whether NewReader accepts a content coding: gzip (and its alias x-gzip), and deflate,
// which in HTTP and gRPC is the zlib format (RFC 9110 §8.4.1.2).
func Supported(encoding string) bool {
	switch encoding {
	case "gzip", "x-gzip", "deflate":
		return true
	}
	return false
}

// Reader inflates one body within its Inflater's bounds. Close it (once) to give back what it
// took from the budget.
type Reader struct {
	in      *Inflater
	max     int64 // the most it may produce: the Inflater's MaxBytes, or less
	src     countingReader
	z       io.Reader // *gzip.Reader or zlib's reader
	zlib    bool
	out     int64 // bytes produced so far
	charged int64 // bytes taken from the budget
	err     error
}

// countingReader counts the compressed bytes the decompressor has read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// NewReader returns a Reader inflating src, compressed with encoding (see Supported). A header
// that is not the encoding's is a Corrupt error.
func (in *Inflater) NewReader(encoding string, src io.Reader) (*Reader, error) {
	return in.newReader(encoding, src, in.maxBytes)
}

// newReader is NewReader producing at most limit bytes (at most MaxBytes).
func (in *Inflater) newReader(encoding string, src io.Reader, limit int64) (*Reader, error) {
	r := &Reader{in: in, src: countingReader{r: src}, max: min(limit, in.maxBytes)}
	if err := r.reset(encoding); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// reset starts r on the current src, reusing its decompressor, or one from the pool.
func (r *Reader) reset(encoding string) error {
	r.out, r.err = 0, nil
	var err error
	switch encoding {
	case "gzip", "x-gzip":
		zr, _ := r.z.(*gzip.Reader)
		if zr == nil {
			if zr, _ = r.in.gzips.Get().(*gzip.Reader); zr == nil {
				zr = new(gzip.Reader)
			}
		}
		r.z, r.zlib = zr, false
		err = zr.Reset(&r.src)
	case "deflate":
		if zr, ok := r.z.(zlib.Resetter); ok && r.zlib {
			err = zr.Reset(&r.src, nil)
		} else if zr, ok := r.in.zlibs.Get().(zlib.Resetter); ok {
			r.z, r.zlib = zr.(io.Reader), true
			err = zr.Reset(&r.src, nil)
		} else {
			var zr io.ReadCloser
			zr, err = zlib.NewReader(&r.src)
			if err == nil {
				r.z, r.zlib = zr, true
			}
		}
	default:
		return fmt.Errorf("inflate: unsupported encoding %q", encoding)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.err = &Error{Reason: Corrupt, Err: err}
		return r.err
	}
	return nil
}

// Read implements io.Reader. Its errors are *Error, but for the source's own (a client gone
// away) and io.EOF.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	// Never produce more than one byte past the bound: that byte is the proof of crossing it.
	if room := r.max + 1 - r.out; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := r.z.Read(p)
	r.out += int64(n)
	switch {
	case r.out > r.max:
		r.err = r.in.refuse(TooLarge, r.max)
	case r.in.maxRatio > 0 && r.out > ratioFloor && r.out > r.in.maxRatio*r.src.n:
		r.err = r.in.refuse(TooDense, r.in.maxRatio)
	case r.out > r.charged:
		step := max(chargeStep, r.out-r.charged)
		if !r.in.budget.take(step) {
			r.err = r.in.refuse(Busy, r.in.budget.limit)
			break
		}
		r.charged += step
	}
	if r.err != nil {
		return 0, r.err
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if isCorrupt(err) {
			err = &Error{Reason: Corrupt, Err: err}
		}
		r.err = err
	}
	return n, err
}

// isCorrupt tells the decompressor's verdicts on its data from errors of the source below it
// (a client gone away), which pass through as they are.
func isCorrupt(err error) bool {
	var ce flate.CorruptInputError
	var ie flate.InternalError
	return errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrChecksum) ||
		errors.Is(err, zlib.ErrHeader) || errors.Is(err, zlib.ErrDictionary) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ce) || errors.As(err, &ie)
}

// Produced is how many bytes r has inflated.
func (r *Reader) Produced() int64 { return r.out }

// Close gives back what r took from the budget and returns its decompressor to the pool. It
// does not close the source.
func (r *Reader) Close() error {
	r.in.budget.give(r.charged)
	r.charged = 0
	if r.z != nil {
		if r.zlib {
			r.in.zlibs.Put(r.z)
		} else {
			r.in.gzips.Put(r.z)
		}
		r.z = nil
	}
	if r.err == nil {
		r.err = errClosed
	}
	return nil
}

var errClosed = errors.New("inflate: read after Close")
