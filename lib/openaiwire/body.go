package openaiwire

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/internal/jsonwire"
)

// Body is a request body's top-level members, read in one pass of jsonwire's scanner and
// editable: the view every pipeline stage reads and edits, so that the body is parsed once and
// encoded at most once however many stages touch it.
//
// A member's name is its unescaped value, as encoding/json's Unmarshal into a
// map[string]json.RawMessage has it (invalid UTF-8 and lone surrogates become U+FFFD), and the
// last of duplicate members wins, as it does there. A value is its bytes in the source, not a
// copy: the source must not change while the Body is in use.
//
// An unedited Body writes its source as it is (AppendJSON). An edited one writes the layout the
// gateway's body edits have always had: members sorted by name, names escaped as json.Marshal
// escapes a string, values verbatim, nothing between members but ','. Sorting is what lets
// edits be batched: two sorted rewrites in a row give the bytes of one with both edits.
type Body struct {
	src     []byte
	members []member // sorted by name, one per name
	edits   []edit   // Set and Drop, in order: the last one for a name wins
	frozen  bool     // Freeze: Set and Drop panic
}

type member struct {
	name       string // shares src's bytes unless the key was escaped
	start, end int    // the value is src[start:end]
}

type edit struct {
	name  string
	value []byte
	drop  bool
}

var errNotObject = errors.New("openaiwire: a request body must be a JSON object")

// Parse reads src's top-level members. It accepts exactly the JSON objects encoding/json
// accepts (invalid UTF-8 in strings included, nesting up to jsonwire.DefaultMaxDepth); anything
// else, null included, is an error.
func Parse(src []byte) (*Body, error) {
	s := jsonwire.NewScanner(src, jsonwire.Options{})
	if s.Peek() != '{' {
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("openaiwire: reading the request body: %w", err)
		}
		return nil, errNotObject
	}
	if err := s.EnterObject(); err != nil {
		return nil, fmt.Errorf("openaiwire: reading the request body: %w", err)
	}
	// Most bodies have a few dozen members at most: collect them on the stack and keep one
	// exactly sized copy.
	var buf [32]member
	ms := buf[:0]
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return nil, fmt.Errorf("openaiwire: reading the request body: %w", err)
		}
		if !more {
			break
		}
		v, err := s.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("openaiwire: reading the request body: %w", err)
		}
		ms = append(ms, member{name: memberName(src, key), start: v.Start, end: v.End})
	}
	if err := s.Finish(); err != nil {
		return nil, fmt.Errorf("openaiwire: reading the request body: %w", err)
	}
	ms = lastByName(ms, func(m member) string { return m.name })
	return &Body{src: src, members: slices.Clone(ms)}, nil
}

// lastByName sorts s by name and keeps, of each run of one name, its last element in s: the
// member that wins among duplicates, the edit that wins among a name's edits.
func lastByName[T any](s []T, name func(T) string) []T {
	slices.SortStableFunc(s, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	n := 0
	for i := range s {
		if i+1 < len(s) && name(s[i+1]) == name(s[i]) {
			continue
		}
		s[n] = s[i]
		n++
	}
	return s[:n]
}

// memberName is a key's value: its bytes in src when they need no decoding, else unescaped
// (ReplaceInvalid decodes as encoding/json decodes a map key).
func memberName(src []byte, key jsonwire.Token) string {
	c := key.Contents(src)
	if key.Flags&jsonwire.Escaped == 0 && (key.Flags&jsonwire.NonASCII == 0 || utf8.Valid(c)) {
		if len(c) == 0 {
			return ""
		}
		return unsafe.String(&c[0], len(c))
	}
	// The scanner checked the string, so unescaping cannot fail.
	name, _ := jsonwire.UnescapeString(c, jsonwire.ReplaceInvalid)
	return name
}

// Get is the value of member name, as edited, and whether the body has it. The bytes are the
// body's: read them, do not change them.
func (b *Body) Get(name string) ([]byte, bool) {
	for i := len(b.edits) - 1; i >= 0; i-- {
		if e := &b.edits[i]; e.name == name {
			return e.value, !e.drop
		}
	}
	if i, ok := b.find(name); ok {
		m := &b.members[i]
		return b.src[m.start:m.end:m.end], true
	}
	return nil, false
}

// Has reports whether the body, as edited, has member name.
func (b *Body) Has(name string) bool {
	_, ok := b.Get(name)
	return ok
}

func (b *Body) find(name string) (int, bool) {
	return slices.BinarySearchFunc(b.members, name, func(m member, name string) int { return strings.Compare(m.name, name) })
}

// Set adds member name, or replaces its value, with value: JSON the caller vouches for, written
// as it is. The Body keeps value: the caller must not change it afterwards. A name that is not
// UTF-8 is written with U+FFFD for each invalid byte, as json.Marshal writes it, so it reads
// back as another name than the one Set.
func (b *Body) Set(name string, value []byte) {
	b.mustEdit()
	b.edits = append(b.edits, edit{name: name, value: value})
}

// Freeze makes b read-only: a later Set or Drop panics, since b is shared by readers that must
// not see it change (a pipeline.Request's view, which its copies share); a Clone is editable.
func (b *Body) Freeze() { b.frozen = true }

func (b *Body) mustEdit() {
	if b.frozen {
		panic("openaiwire: edit of a frozen Body (edit a Clone, or the request through Edit)")
	}
}

// Drop removes the members named, those the body has; a later Set adds one again. Even a Drop
// of a member the body lacks is an edit: the body is written in the sorted layout.
func (b *Body) Drop(names ...string) {
	b.mustEdit()
	for _, name := range names {
		b.edits = append(b.edits, edit{name: name, drop: true})
	}
}

// Dirty reports whether the body has been edited (Set or Drop), so AppendJSON writes it in the
// sorted layout rather than as its source.
func (b *Body) Dirty() bool { return len(b.edits) > 0 }

// Clone is a copy whose edits do not change b, nor b's edits it. It shares the source and the
// parse, which neither ever changes.
func (b *Body) Clone() *Body {
	c := *b
	c.edits = slices.Clip(c.edits) // the clone's next edit appends to an array of its own
	c.frozen = false
	return &c
}

// EditedSince yields the names b has Set or Dropped since it was cloned from base (all of its
// edits when base is nil), in the order of the edits, repeats included.
func (b *Body) EditedSince(base *Body) iter.Seq[string] {
	from := 0
	if base != nil {
		from = min(len(base.edits), len(b.edits))
	}
	return func(yield func(string) bool) {
		for _, e := range b.edits[from:] {
			if !yield(e.name) {
				return
			}
		}
	}
}

// All yields the body's members as edited, sorted by name.
func (b *Body) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		var buf [8]edit
		b.each(buf[:0], yield)
	}
}

// each yields the members as edited, sorted by name; buf is scratch for the edits' summary.
func (b *Body) each(buf []edit, yield func(string, []byte) bool) {
	final := b.finalEdits(buf)
	mi, ei := 0, 0
	for mi < len(b.members) || ei < len(final) {
		if ei == len(final) || mi < len(b.members) && b.members[mi].name < final[ei].name {
			m := &b.members[mi]
			mi++
			if !yield(m.name, b.src[m.start:m.end:m.end]) {
				return
			}
			continue
		}
		e := &final[ei]
		ei++
		if mi < len(b.members) && b.members[mi].name == e.name {
			mi++ // the edit replaces or drops the member
		}
		if !e.drop && !yield(e.name, e.value) {
			return
		}
	}
}

// finalEdits is the last edit of each name, sorted by name, appended to buf.
func (b *Body) finalEdits(buf []edit) []edit {
	return lastByName(append(buf[:0], b.edits...), func(e edit) string { return e.name })
}

// AppendJSON appends the body to dst: an unedited body's source as it is; an edited body in the
// sorted layout (AppendSorted).
func (b *Body) AppendJSON(dst []byte) []byte {
	if !b.Dirty() {
		return append(dst, b.src...)
	}
	return b.AppendSorted(dst)
}

// AppendSorted appends the body's members as edited in the sorted layout, whether or not it was
// edited: '{', each member sorted by name as its name escaped like json.Marshal escapes a string,
// ':', its value verbatim, members separated by ',', then '}'.
func (b *Body) AppendSorted(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	var buf [8]edit
	b.each(buf[:0], func(name string, value []byte) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = jsonwire.AppendString(dst, name, jsonwire.EncodingJSON)
		dst = append(append(dst, ':'), value...)
		return true
	})
	return append(dst, '}')
}

// ValueSpan is where member name's value is in what AppendJSON writes (with an empty dst):
// out[start:end]; ok is false when the body has no such member. It writes nothing: a caller
// that must splice the value later learns where without encoding the body twice.
func (b *Body) ValueSpan(name string) (start, end int, ok bool) {
	if !b.Dirty() {
		i, ok := b.find(name)
		if !ok {
			return 0, 0, false
		}
		return b.members[i].start, b.members[i].end, true
	}
	_, start, end, ok = b.layout(name, true)
	return start, end, ok
}

// Len is the length of what AppendJSON writes, found without writing it.
func (b *Body) Len() int {
	if !b.Dirty() {
		return len(b.src)
	}
	n, _, _, _ := b.layout("", false)
	return n
}

// layout walks the sorted layout without writing it: its length, or, when find is set and the
// body has member name, where its value is (size is then where the walk stopped).
func (b *Body) layout(name string, find bool) (size, start, end int, ok bool) {
	off := 1 // '{'
	first := true
	var buf [8]edit
	var scratch [64]byte
	b.each(buf[:0], func(n string, value []byte) bool {
		if !first {
			off++ // ','
		}
		first = false
		off += len(jsonwire.AppendString(scratch[:0], n, jsonwire.EncodingJSON)) + 1 // name and ':'
		if find && n == name {
			start, end, ok = off, off+len(value), true
			return false
		}
		off += len(value)
		return true
	})
	if ok {
		return off, start, end, true
	}
	return off + 1, 0, 0, false // '}'
}
