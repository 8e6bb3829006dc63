package respcache

import (
	"bytes"
	"errors"
	"slices"

	"github.com/infergate/infergate/internal/jsonwire"
)

var (
	errSyntax  = errors.New("respcache: malformed JSON")
	errTooDeep = errors.New("respcache: JSON nested too deeply")
)

// canonicalJSON appends the canonical form of the JSON value src to dst: object members
// sorted by key (a repeated key keeps its last value, as decoders do), no insignificant space,
// strings with one escaping (only what JSON requires; other characters as UTF-8, invalid UTF-8
// as U+FFFD), numbers in one spelling (1, 1.0 and 1e0 are all 1). Two values that mean the same
// have the same form. Nesting is bounded by maxDepth. It reads the bytes directly, about ten
// times faster than decoding into interfaces and encoding again.
func canonicalJSON(dst, src []byte) ([]byte, error) {
	var p canonParser
	return p.canonical(dst, src)
}

// canonParser walks a document with jsonwire's Scanner, writing its canonical form. One parser
// may write several documents in turn (canonicalMembers: a request's members), keeping its
// buffers.
type canonParser struct {
	jsonwire.Scanner
	buf []byte // a string's value, unescaped
	// objects holds, for each depth, the buffers of the object being read at that depth (one
	// at a time: its members are deeper); the next object at that depth reuses them. Requests
	// nest a few levels: those are in the parser itself, deeper ones in deeper.
	objects [8]objectBuffers
	deeper  []objectBuffers
}

// buffers are the object buffers of depth.
func (p *canonParser) buffers(depth int) *objectBuffers {
	if depth < len(p.objects) {
		return &p.objects[depth]
	}
	for len(p.deeper) <= depth-len(p.objects) {
		p.deeper = append(p.deeper, objectBuffers{})
	}
	return &p.deeper[depth-len(p.objects)]
}

// objectBuffers are an object's members, and their values in canonical form, before sorting.
type objectBuffers struct {
	members []member
	values  []byte
}

// canonical is canonicalJSON with p's buffers.
func (p *canonParser) canonical(dst, src []byte) ([]byte, error) {
	// The bound is the walk's own (value's depth check, as the cache has always counted it);
	// the scanner's, one more, is never the first to be reached.
	p.Scanner = jsonwire.NewScanner(src, jsonwire.Options{MaxDepth: maxDepth + 1})
	dst, err := p.value(dst, 0)
	if err == nil {
		err = p.Finish()
	}
	switch {
	case err == nil:
		return dst, nil
	case errors.Is(err, errTooDeep) || errors.Is(err, jsonwire.ErrTooDeep):
		return nil, errTooDeep
	}
	return nil, errSyntax
}

// value appends the canonical form of the value that comes next, depth values deep (the
// document's own value is 0; a member or an element is one deeper than its object or array).
func (p *canonParser) value(dst []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	switch jsonwire.KindOf(p.Peek()) {
	case jsonwire.Object:
		return p.object(dst, depth)
	case jsonwire.Array:
		if err := p.EnterArray(); err != nil {
			return nil, err
		}
		dst = append(dst, '[')
		for n := 0; ; n++ {
			more, err := p.NextElement()
			if err != nil {
				return nil, err
			}
			if !more {
				return append(dst, ']'), nil
			}
			if n > 0 {
				dst = append(dst, ',')
			}
			if dst, err = p.value(dst, depth+1); err != nil {
				return nil, err
			}
		}
	case jsonwire.String:
		t, err := p.ReadString()
		if err != nil {
			return nil, err
		}
		s := t.Contents(p.Input())
		if t.Flags&jsonwire.Escaped != 0 {
			if p.buf, err = jsonwire.Unescape(p.buf[:0], s, jsonwire.KeepInvalid); err != nil {
				return nil, err
			}
			s = p.buf
		}
		return jsonwire.AppendString(dst, s, jsonwire.Canonical), nil
	case jsonwire.Number:
		t, err := p.ReadNumber()
		if err != nil {
			return nil, err
		}
		return appendNumber(dst, string(t.Raw(p.Input())), t.Integer()), nil
	}
	// true, false, null, or the scanner's error.
	t, err := p.ReadValue()
	if err != nil {
		return nil, err
	}
	return append(dst, t.Raw(p.Input())...), nil
}

type member struct {
	key        []byte // unescaped
	start, end int    // the canonical value in the scratch buffer
}

func (p *canonParser) object(dst []byte, depth int) ([]byte, error) {
	if err := p.EnterObject(); err != nil {
		return nil, err
	}
	members, values := p.buffers(depth).members[:0], p.buffers(depth).values[:0]
	for {
		t, more, err := p.NextMember()
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		key := t.Contents(p.Input())
		if t.Flags&jsonwire.Escaped != 0 {
			// A key of its own: p.buf is reused for the strings in the member's value.
			if key, err = jsonwire.Unescape(nil, key, jsonwire.KeepInvalid); err != nil {
				return nil, err
			}
		}
		start := len(values)
		if values, err = p.value(values, depth+1); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, start: start, end: len(values)})
	}
	*p.buffers(depth) = objectBuffers{members: members, values: values}
	// Sorted by key, stably: of a repeated key the last stays.
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	dst = append(dst, '{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(members[i+1].key, m.key) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonwire.AppendString(dst, m.key, jsonwire.Canonical)
		dst = append(dst, ':')
		dst = append(dst, values[m.start:m.end]...)
	}
	return append(dst, '}'), nil
}
