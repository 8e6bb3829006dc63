package respcache

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
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
	p := canonParser{src: src}
	dst, err := p.value(dst, 0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.src) {
		return nil, errSyntax
	}
	return dst, nil
}

type canonParser struct {
	src []byte
	i   int
}

func (p *canonParser) space() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *canonParser) value(dst []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	p.space()
	if p.i >= len(p.src) {
		return nil, errSyntax
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object(dst, depth)
	case c == '[':
		p.i++
		dst = append(dst, '[')
		p.space()
		if p.i < len(p.src) && p.src[p.i] == ']' {
			p.i++
			return append(dst, ']'), nil
		}
		for {
			var err error
			if dst, err = p.value(dst, depth+1); err != nil {
				return nil, err
			}
			p.space()
			if p.i >= len(p.src) {
				return nil, errSyntax
			}
			switch p.src[p.i] {
			case ',':
				p.i++
				dst = append(dst, ',')
			case ']':
				p.i++
				return append(dst, ']'), nil
			default:
				return nil, errSyntax
			}
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendString(dst, s), nil
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.src) && bytes.IndexByte([]byte("+-.0123456789eE"), p.src[p.i]) >= 0 {
			p.i++
		}
		return appendNumber(dst, string(p.src[start:p.i])), nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(p.src[p.i:], []byte(lit)) {
				p.i += len(lit)
				return append(dst, lit...), nil
			}
		}
		return nil, errSyntax
	}
}

type member struct {
	key        string
	start, end int // the canonical value in the scratch buffer
}

func (p *canonParser) object(dst []byte, depth int) ([]byte, error) {
	p.i++ // '{'
	var (
		members []member
		scratch []byte
	)
	p.space()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		return append(dst, '{', '}'), nil
	}
	for {
		p.space()
		if p.i >= len(p.src) || p.src[p.i] != '"' {
			return nil, errSyntax
		}
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.src) || p.src[p.i] != ':' {
			return nil, errSyntax
		}
		p.i++
		start := len(scratch)
		if scratch, err = p.value(scratch, depth+1); err != nil {
			return nil, err
		}
		members = append(members, member{key: key, start: start, end: len(scratch)})
		p.space()
		if p.i >= len(p.src) {
			return nil, errSyntax
		}
		if p.src[p.i] == '}' {
			p.i++
			break
		}
		if p.src[p.i] != ',' {
			return nil, errSyntax
		}
		p.i++
	}
	// Sorted by key, stably: of a repeated key the last stays.
	slices.SortStableFunc(members, func(a, b member) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	dst = append(dst, '{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, m.key)
		dst = append(dst, ':')
		dst = append(dst, scratch[m.start:m.end]...)
	}
	return append(dst, '}'), nil
}

// str reads a JSON string at p.i, unescaped (invalid UTF-8 and lone surrogates become U+FFFD,
// as encoding/json decodes them).
func (p *canonParser) str() (string, error) {
	p.i++ // '"'
	start := p.i
	// The common case: no escapes.
	for p.i < len(p.src) {
		c := p.src[p.i]
		if c == '"' {
			s := string(p.src[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	b := append([]byte(nil), p.src[start:p.i]...)
	for p.i < len(p.src) {
		c := p.src[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c < 0x20:
			return "", errSyntax
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.src) {
			return "", errSyntax
		}
		e := p.src[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", errSyntax
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if p.i+1 < len(p.src) && p.src[p.i] == '\\' && p.src[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if lo, ok := p.hex4(); ok {
						if d := utf16.DecodeRune(r, lo); d != utf8.RuneError {
							r2 = d
						} else {
							p.i = save // not a pair: the next escape stands alone
						}
					} else {
						return "", errSyntax
					}
				}
				r = r2
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

func (p *canonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.src) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.src[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}
