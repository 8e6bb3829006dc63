package inflate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// FuzzReader: whatever a client sends as a compressed body, the reader never panics, never
// produces more than its bound, and fails only with an *Error (the source here cannot fail).
func FuzzReader(f *testing.F) {
	f.Add(gz(f, []byte("hello")), false)
	f.Add(zl(f, bytes.Repeat([]byte("a"), 1<<12)), true)
	f.Add(gz(f, make([]byte, 3<<10)), false)
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, false)
	in := New(Config{MaxBytes: 2 << 10, MaxInFlightBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, body []byte, deflate bool) {
		enc := "gzip"
		if deflate {
			enc = "deflate"
		}
		r, err := in.NewReader(enc, bytes.NewReader(body))
		if err != nil {
			if reason(err) != Corrupt {
				t.Fatalf("NewReader: %v", err)
			}
			return
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if n > in.maxBytes {
			t.Fatalf("produced %d bytes past the %d bound", n, in.maxBytes)
		}
		var ie *Error
		if err != nil && !errors.As(err, &ie) {
			t.Fatalf("unexpected error %T %v", err, err)
		}
		if used := in.budget.used.Load(); used != 0 {
			t.Fatalf("budget not given back: %d", used)
		}
	})
}

// FuzzEnvelopes: the rewritten stream of any request body is a sequence of whole envelopes, none
// of them compressed, each within the bound; or the bytes of a partial header; or an error.
func FuzzEnvelopes(f *testing.F) {
	f.Add(envelope(1, gz(f, []byte("hello"))))
	f.Add(append(envelope(0, []byte("plain")), envelope(1, gz(f, make([]byte, 4<<10)))...))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x8b})
	f.Add([]byte{0, 0, 0})
	in := New(Config{MaxBytes: 2 << 10, MaxInFlightBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, body []byte) {
		e := in.envelopes(bytes.NewReader(body), "gzip")
		out, err := io.ReadAll(e)
		e.Close()
		if used := in.budget.used.Load(); used != 0 {
			t.Fatalf("budget not given back: %d", used)
		}
		var ie *Error
		if err != nil && !errors.As(err, &ie) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("unexpected error %T %v", err, err)
		}
		for len(out) >= 5 {
			flags, size := out[0], binary.BigEndian.Uint32(out[1:5])
			if flags&flagCompressed != 0 {
				t.Fatalf("a compressed message passed through: % x", out[:5])
			}
			if uint32(len(out)-5) < size {
				if err == nil {
					t.Fatalf("message cut short without an error")
				}
				return
			}
			if int64(size) > max(in.maxBytes, int64(len(body))) {
				t.Fatalf("a whole message of %d bytes", size)
			}
			out = out[5+size:]
		}
		if len(out) > 0 && err == nil && len(body) >= 5 && !bytes.HasSuffix(body, out) {
			t.Fatalf("trailing bytes %x that the body did not end with", out)
		}
	})
}
