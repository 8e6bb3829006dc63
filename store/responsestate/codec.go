package responsestate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"time"
)

// The Redis value of a record:
//
//	<len(owner) in decimal>:<owner>   first and in text, so that luaDelete checks the owner
//	                                  with a GETRANGE of that prefix, never reading the record
//	'1'                               the format's version
//	id, model                         each a uvarint length, then the bytes
//	created_at                        varint, Unix milliseconds
//	response                          uvarint length, then the bytes
//	input, context                    each a uvarint count, then that many items (uvarint
//	                                  length, then the bytes)
//
// Length-prefixed rather than JSON: the items come back byte for byte as they were given, as
// from Memory (encoding/json would compact them and escape <, > and &), and decoding copies
// them out without scanning them. The decoder reads what Redis holds, which anything with
// access to Redis may have written: it checks every length against what is left, and accepts
// only the one encoding encodeRecord writes (minimal varints, no leading zeros, nothing after
// the last item), so that a value decodes to a record exactly when it is that record's
// encoding.
const formatVersion = '1'

// The range of a stored CreatedAt: years 1 to 9999, where a time and its Unix milliseconds
// convert both ways (the zero time.Time is the lower end).
var (
	minMillis = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	maxMillis = time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
)

// ownerPrefix is how a value owned by owner starts.
func ownerPrefix(owner string) string {
	return strconv.Itoa(len(owner)) + ":" + owner
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

func varintLen(x int64) int {
	ux := uint64(x) << 1 // binary.PutVarint's zig-zag
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func bytesLen(n int) int { return uvarintLen(uint64(n)) + n }

// encodedSize is the length of encodeRecord's value: what Redis's MaxRecordBytes bounds.
func encodedSize(r *Record) int {
	n := len(strconv.Itoa(len(r.Owner))) + 1 + len(r.Owner) + 1 +
		bytesLen(len(r.ID)) + bytesLen(len(r.Model)) + varintLen(r.CreatedAt.UnixMilli()) +
		bytesLen(len(r.Response)) + uvarintLen(uint64(len(r.Input))) + uvarintLen(uint64(len(r.Context)))
	for _, it := range r.Input {
		n += bytesLen(len(it))
	}
	for _, it := range r.Context {
		n += bytesLen(len(it))
	}
	return n
}

// encodeRecord is r's Redis value, of length size (encodedSize(r)).
func encodeRecord(r *Record, size int) ([]byte, error) {
	ms := r.CreatedAt.UnixMilli()
	if ms < minMillis || ms > maxMillis {
		return nil, fmt.Errorf("responsestate: encode %s: created_at %v is outside years 1 to 9999", r.ID, r.CreatedAt)
	}
	b := make([]byte, 0, size)
	b = append(b, ownerPrefix(r.Owner)...)
	b = append(b, formatVersion)
	b = appendBytes(b, r.ID)
	b = appendBytes(b, r.Model)
	b = binary.AppendVarint(b, ms)
	b = appendBytes(b, r.Response)
	for _, items := range [][]json.RawMessage{r.Input, r.Context} {
		b = binary.AppendUvarint(b, uint64(len(items)))
		for _, it := range items {
			b = appendBytes(b, it)
		}
	}
	return b, nil
}

func appendBytes[T ~string | ~[]byte](b []byte, v T) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

var errCorrupt = errors.New("corrupt stored record")

// decodeRecord reads encodeRecord's value. The record's JSON values are slices of data (each
// capped, so an append to one cannot reach the next); empty ones, and empty lists, are nil.
func decodeRecord(data []byte) (*Record, error) {
	d := decoder{b: data, size: len(data)}
	r := &Record{Owner: d.owner()}
	if d.err == nil && (len(d.b) == 0 || d.b[0] != formatVersion) {
		d.fail("unknown format version")
	}
	d.skip(1)
	r.ID = string(d.bytes())
	r.Model = string(d.bytes())
	ms := d.varint()
	if d.err == nil && (ms < minMillis || ms > maxMillis) {
		d.fail("created_at out of range")
	}
	r.CreatedAt = time.UnixMilli(ms)
	r.Response = d.bytes()
	r.Input = d.items()
	r.Context = d.items()
	if d.err == nil && len(d.b) > 0 {
		d.fail(strconv.Itoa(len(d.b)) + " bytes after the record")
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

// decoder reads a value front to back; after the first error every read returns nothing.
type decoder struct {
	b    []byte
	size int // of the whole value, for the offset in an error
	err  error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s (at byte %d of %d)", errCorrupt, why, d.size-len(d.b), d.size)
		d.b = nil
	}
}

func (d *decoder) skip(n int) {
	if d.err == nil {
		d.b = d.b[n:]
	}
}

// owner reads <len>:<owner>, the length in canonical decimal.
func (d *decoder) owner() string {
	i := bytes.IndexByte(d.b, ':')
	if i <= 0 || i > 10 || (d.b[0] == '0' && i > 1) {
		d.fail("bad owner length")
		return ""
	}
	n := 0
	for _, c := range d.b[:i] {
		if c < '0' || c > '9' {
			d.fail("bad owner length")
			return ""
		}
		n = n*10 + int(c-'0')
	}
	if n > len(d.b)-i-1 {
		d.fail("owner past the end")
		return ""
	}
	owner := string(d.b[i+1 : i+1+n])
	d.b = d.b[i+1+n:]
	return owner
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(v) {
		d.fail("bad length")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n != varintLen(v) {
		d.fail("bad created_at")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("value past the end")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return v
}

func (d *decoder) items() []json.RawMessage {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return nil
	}
	// Each item takes at least its length's byte: a count past that is corrupt, and the
	// allocation below stays within the value's size.
	if n > uint64(len(d.b)) {
		d.fail("more items than bytes")
		return nil
	}
	out := make([]json.RawMessage, n)
	for i := range out {
		out[i] = d.bytes()
	}
	if d.err != nil {
		return nil
	}
	return out
}
