package granitestage

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonwire"
)

// maxScanDepth is the nesting the request fast paths (fields.go) follow; deeper bodies go to
// encoding/json. Upstream answers are read by openaiwire.
const maxScanDepth = 256

// jscan is the stage's reader: jsonwire's validating Scanner, with the walks its fast paths
// share. Its methods return false at anything that is not JSON, and at what the fast path leaves
// to encoding/json.
type jscan struct{ jsonwire.Scanner }

func newScan(b []byte) jscan {
	return jscan{jsonwire.NewScanner(b, jsonwire.Options{MaxDepth: maxScanDepth})}
}

// skip reads one value of any kind.
func (s *jscan) skip() bool {
	_, err := s.ReadValue()
	return err == nil
}

// object reads an object member by member: member gets each name (escaped names go to
// encoding/json) with the scanner at its value, and reads the value.
func (s *jscan) object(member func(name []byte) bool) bool {
	if s.EnterObject() != nil {
		return false
	}
	for {
		key, more, err := s.NextMember()
		if err != nil || !more {
			return err == nil
		}
		if key.Flags&jsonwire.Escaped != 0 {
			return false // an escaped name: encoding/json matches its unescaped form
		}
		if !member(key.Contents(s.Input())) {
			return false
		}
	}
}

// array reads an array, elem reading each element.
func (s *jscan) array(elem func() bool) bool {
	if s.EnterArray() != nil {
		return false
	}
	for {
		more, err := s.NextElement()
		if err != nil || !more {
			return err == nil
		}
		if !elem() {
			return false
		}
	}
}

// field says which of names (exact) a member name is: its index, -1 for none, or -2 for a
// name that encoding/json would match case-insensitively (left to it).
func field(name []byte, names ...string) int {
	for i, n := range names {
		if string(name) == n {
			return i
		}
	}
	// The names are ASCII: an ASCII name of another length is none of them in any case (only
	// a name with other letters, like ſ for s, can fold to one of another length).
	ascii := true
	for _, c := range name {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	for _, n := range names {
		if (!ascii || len(name) == len(n)) && bytes.EqualFold(name, []byte(n)) {
			return -2
		}
	}
	return -1
}

// once records that member i was read; a second time is left to encoding/json (it merges).
func once(seen *uint32, i int) bool {
	if *seen&(1<<i) != 0 {
		return false
	}
	*seen |= 1 << i
	return true
}

// known reads an object whose members named in names are read by read, given the name's index,
// each once; other members are skipped. A name met twice, escaped, or one of names in another
// case is false: encoding/json treats those in its own way.
func (s *jscan) known(names []string, read func(f int) bool) bool {
	var seen uint32
	return s.object(func(name []byte) bool {
		f := field(name, names...)
		if f == -1 {
			return s.skip()
		}
		return f >= 0 && once(&seen, f) && read(f)
	})
}

// objects reads an array of objects (a null element is a zero T), appending each to
// *dst: read reads member f (of names, as known reads them) into the element being built.
func objects[T any](s *jscan, dst *[]T, names []string, read func(e *T, f int) bool) bool {
	return s.array(func() bool {
		var e T
		if !s.nullOr(func() bool {
			return s.known(names, func(f int) bool { return read(&e, f) })
		}) {
			return false
		}
		*dst = append(*dst, e)
		return true
	})
}

// end says whether only white space is left: a document is one value.
func (s *jscan) end() bool { return s.Finish() == nil }

// stringValue reads a string or null into *dst (null leaves it, as encoding/json does).
func (s *jscan) stringValue(dst *string) bool {
	if s.ReadNull() {
		return true
	}
	v, ok := s.str()
	if ok {
		*dst = v
	}
	return ok
}

// stringPtr reads a string into a new *dst, or null (which leaves *dst nil, as encoding/json
// does for a member it meets once).
func (s *jscan) stringPtr(dst **string) bool {
	if s.ReadNull() {
		return true
	}
	v, ok := s.str()
	if ok {
		*dst = &v
	}
	return ok
}

// nullOr reads null, or else the value read reads.
func (s *jscan) nullOr(read func() bool) bool {
	if s.Peek() == 'n' {
		return s.ReadNull()
	}
	return read()
}

// rawValue reads one value of any kind and returns its bytes, capped: appending to them cannot
// write past them.
func (s *jscan) rawValue() ([]byte, bool) {
	t, err := s.ReadValue()
	if err != nil {
		return nil, false
	}
	return t.Raw(s.Input()), true
}

// str reads a string and decodes it as encoding/json does: escapes resolved, a lone or broken
// surrogate and each byte of invalid UTF-8 as U+FFFD.
func (s *jscan) str() (string, bool) {
	t, err := s.ReadString()
	if err != nil {
		return "", false
	}
	if t.Plain() {
		return string(t.Contents(s.Input())), true
	}
	v, err := jsonwire.UnescapeString(t.Contents(s.Input()), jsonwire.ReplaceInvalid)
	return v, err == nil
}

var errTooLarge = errors.New("granitestage: answer over the bound")

// readAll reads r to its end into buf, and fails with errTooLarge past max bytes.
func readAll(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit+1)])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > limit:
			return buf, errTooLarge
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		}
	}
}

// maxPooledBuffer bounds the read buffers a stage keeps for its next answers.
const maxPooledBuffer = 1 << 20

// buffers are a stage's reusable byte buffers: the reads of upstream answers, and the Granite
// members of an answer's messages while it is written.
type buffers struct{ p sync.Pool }

func (b *buffers) get() *[]byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return v
	}
	return new([]byte)
}

func (b *buffers) put(v *[]byte) {
	if cap(*v) <= maxPooledBuffer {
		*v = (*v)[:0]
		b.p.Put(v)
	}
}
