package respcache

import (
	"encoding/binary"
	"errors"
	"math"
)

// The Redis store's binary records. An entry's meta (its hash's "m" field, and the body of the
// message announcing it) is what a replica's index needs without the response:
//
//	version byte (1) | uvarint len(partition) | partition | uvarint dim | dim float32 (little
//	endian) | uvarint size (the response's and the words' bytes) | uvarint expiry (Unix ms)
//
// A message on the channel is 'a' | origin | uvarint len(key) | key | meta (an entry was put),
// or 'f' | origin (the store was flushed). origin is 8 bytes naming the replica that sent it,
// which applied the change to its own index already and skips its own messages: applied again
// when they arrive, they would undo a later local change for a moment (a flush emptying the index
// after the next Put, an older Put replacing a newer one).

const (
	metaVersion = 1
	msgAdd      = 'a'
	msgFlush    = 'f'
	// maxDim bounds a vector read from Redis (embedders give hundreds to a few thousand).
	maxDim = 1 << 16
)

var errBadRecord = errors.New("respcache: malformed record")

// meta is an entry's description without its response.
type meta struct {
	partition string
	vector    []float32
	size      int64 // the response's and the words' length
	expires   int64 // Unix ms
}

func appendMeta(b []byte, m meta) []byte {
	b = append(b, metaVersion)
	b = binary.AppendUvarint(b, uint64(len(m.partition)))
	b = append(b, m.partition...)
	b = binary.AppendUvarint(b, uint64(len(m.vector)))
	for _, x := range m.vector {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	b = binary.AppendUvarint(b, uint64(m.size))
	return binary.AppendUvarint(b, uint64(m.expires))
}

// decodeMeta reads a meta record, checking every length against the bytes present.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) == 0 || b[0] != metaVersion {
		return m, errBadRecord
	}
	r := reader{b: b[1:]}
	m.partition = string(r.bytes())
	dim := r.uvarint()
	if r.err == nil && (dim > maxDim || dim*4 > uint64(len(r.b))) {
		r.err = errBadRecord
	}
	if r.err == nil && dim > 0 {
		m.vector = make([]float32, dim)
		for i := range m.vector {
			m.vector[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.b[4*i:]))
		}
		r.b = r.b[4*dim:]
	}
	size, expires := r.uvarint(), r.uvarint()
	if r.err == nil && (len(r.b) != 0 || size > math.MaxInt32 || expires > math.MaxInt64) {
		r.err = errBadRecord
	}
	m.size, m.expires = int64(size), int64(expires)
	return m, r.err
}

func appendAddMessage(b []byte, origin uint64, key string, m meta) []byte {
	b = append(b, msgAdd)
	b = binary.LittleEndian.AppendUint64(b, origin)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return appendMeta(b, m)
}

func appendFlushMessage(b []byte, origin uint64) []byte {
	return binary.LittleEndian.AppendUint64(append(b, msgFlush), origin)
}

// message is a decoded channel message.
type message struct {
	origin uint64
	flush  bool // else an entry was put
	key    string
	meta   meta
}

// decodeMessage reads a channel message.
func decodeMessage(b []byte) (message, error) {
	var msg message
	if len(b) < 9 {
		return msg, errBadRecord
	}
	msg.origin = binary.LittleEndian.Uint64(b[1:9])
	switch b[0] {
	case msgFlush:
		if len(b) != 9 {
			return msg, errBadRecord
		}
		msg.flush = true
		return msg, nil
	case msgAdd:
		r := reader{b: b[9:]}
		msg.key = string(r.bytes())
		if r.err != nil {
			return msg, r.err
		}
		var err error
		msg.meta, err = decodeMeta(r.b)
		return msg, err
	}
	return msg, errBadRecord
}

// reader reads varint-framed fields; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errBadRecord
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errBadRecord
	}
	if r.err != nil {
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}
