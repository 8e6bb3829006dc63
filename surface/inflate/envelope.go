package inflate

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
)

// flagCompressed marks a compressed message in the envelope gRPC, gRPC-Web and Connect's
// streaming protocol share: one flags byte, a 4-byte big-endian length, the message.
const flagCompressed = 0x01

// envelopes rewrites an enveloped request body so that every compressed message arrives
// inflated, with its flag cleared and its length the inflated one; uncompressed messages pass
// through as they arrive, never buffered. A compressed message's declared length is never
// trusted with an allocation: its bytes are inflated as they are read, and only the inflated
// output, bounded by the Inflater, is held, until the next message is read.
type envelopes struct {
	in       *Inflater
	src      io.Reader
	encoding string
	r        *Reader // reused across the stream's messages

	head    [5]byte
	pending []byte // the current message, rewritten, still to be returned
	off     int
	through uint32 // bytes of an uncompressed message still to pass through from src
	err     error
}

func (in *Inflater) envelopes(src io.Reader, encoding string) *envelopes {
	return &envelopes{in: in, src: src, encoding: encoding}
}

func (e *envelopes) Read(p []byte) (int, error) {
	for {
		switch {
		case e.off < len(e.pending):
			n := copy(p, e.pending[e.off:])
			e.off += n
			if e.off == len(e.pending) {
				e.release() // the reader has it all: a stream that goes quiet now holds nothing
			}
			return n, nil
		case e.through > 0:
			if uint32(len(p)) > e.through {
				p = p[:e.through]
			}
			n, err := e.src.Read(p)
			e.through -= uint32(n)
			if errors.Is(err, io.EOF) && e.through > 0 {
				err = io.ErrUnexpectedEOF
			} else if errors.Is(err, io.EOF) {
				err = nil // the message is whole; EOF comes, if it does, on the next header
			}
			return n, err
		case e.err != nil:
			return 0, e.err
		}
		e.err = e.next()
	}
}

// next reads the next message's header and, for a compressed message, inflates it.
func (e *envelopes) next() error {
	e.release()
	n, err := io.ReadFull(e.src, e.head[:])
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF // between messages: the body's proper end
	case errors.Is(err, io.ErrUnexpectedEOF):
		// A partial header: pass on what came, so the handler reports the truncation its way.
		e.pending, e.off = e.head[:n], 0
		return io.EOF
	case err != nil:
		return err
	}
	size := binary.BigEndian.Uint32(e.head[1:])
	if e.head[0]&flagCompressed == 0 {
		e.pending, e.off = e.head[:], 0
		e.through = size
		return nil
	}
	out, err := e.inflate(size)
	if err != nil {
		return err
	}
	out[0] = e.head[0] &^ flagCompressed
	binary.BigEndian.PutUint32(out[1:5], uint32(len(out)-5))
	e.pending, e.off = out, 0
	return nil
}

// inflate reads a compressed message of size bytes and returns it inflated, behind 5 bytes
// left for its new header.
func (e *envelopes) inflate(size uint32) ([]byte, error) {
	body := io.LimitReader(e.src, int64(size))
	if e.r == nil {
		r, err := e.in.NewReader(e.encoding, body)
		if err != nil {
			return nil, err
		}
		e.r = r
	} else {
		e.r.src = countingReader{r: body}
		if err := e.r.reset(e.encoding); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 5, 5+min(int64(size)*4, 64<<10))
	for {
		if len(out) == cap(out) {
			out = slices.Grow(out, len(out)) // doubling: a large message is copied about once
		}
		n, err := e.r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	// The compressed stream ended before the message did: bytes past it are not a message.
	if rest, _ := io.Copy(io.Discard, body); rest > 0 {
		return nil, &Error{Reason: Corrupt, Err: errors.New("data after the end of the compressed stream")}
	}
	return out, nil
}

// release gives back what the current compressed message took from the budget, once its last
// byte was read: the handler holds its own copy now.
func (e *envelopes) release() {
	if e.r != nil {
		e.in.budget.give(e.r.charged)
		e.r.charged = 0
	}
	e.pending, e.off = nil, 0
}

// Close gives back the budget and the decompressor. It must not run during a Read (the Handler's
// owned body sees to that).
func (e *envelopes) Close() {
	if e.r != nil {
		e.r.Close()
		e.r = nil
	}
	e.pending = nil
	if e.err == nil {
		e.err = errClosed
	}
}
