package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The request decoder: one pass of the scanner over the body fills msgRequest, strictly (an
// unknown field, a value of the wrong type or malformed JSON is refused with the field's path),
// with raw JSON values (schemas, tool inputs) kept as slices of the body. encoding/json did the
// same in four times the time: it scans every nested value once per level of nesting.
//
// A request of a few kilobytes decodes into a hundred small values (a struct per message and
// content block, a string per text); allocated one by one, they and the garbage collector cost
// more than the decoding. So the strings are substrings of the body (those without escapes,
// nearly all), and the structs come from storage a pooled decoder keeps.
//
// That storage is bounded (storeMax elements, maxPooled unless a test says otherwise): a list
// that does not fit (messages, tools, a content's blocks) is checked as it is read and then read
// again from the body, element by element into one value, each time the translation walks it
// (walk). A block is a struct of hundreds of bytes for as little as 26 bytes of JSON (a one-letter
// text block): decoded into memory, 300,000 of them cost 213 MB for an 8 MB body. Read where they
// lie, they cost nothing more than the body, whatever their number; the reading again is a few
// passes over bytes the scanner reads at hundreds of MB/s.

// decodeRequest decodes body into req with d (newDecoder); the error is Anthropic's 400. req's
// strings are substrings of body (so body must not change while they are used), its structs and
// slices belong to d until d.release.
func decodeRequest(d *decoder, body []byte, req *msgRequest) *apiError {
	if !utf8.Valid(body) {
		return invalid("The request body is not valid UTF-8.")
	}
	d.s, d.base, d.b = newScanner(body), 0, body
	// The body as a string without a copy (the copy was as large as the body): translate uses
	// the strings only until it returns, and nothing it returns points into them (the model's
	// name is cloned; error messages are built anew).
	d.body = unsafe.String(unsafe.SliceData(body), len(body))
	d.request(req)
	// Anything after the object but white space is refused (a NUL byte too).
	if d.err == nil {
		if d.s.Peek(); d.s.bad() {
			d.syntax()
		} else if d.s.Offset() < len(body) {
			d.err = invalid("The request body must hold one JSON object.")
		}
	}
	return d.err
}

// mode is what the decoder does with what it reads.
type mode uint8

const (
	// modeStore decodes into the request (and the decoder's storage), checking everything.
	modeStore mode = iota
	// modeCheck checks an element of a list that did not fit in storage, as modeStore would,
	// keeping nothing: its strings are not even unquoted.
	modeCheck
	// modeReread decodes such an element again, for a walk: it was checked, so nothing fails,
	// nothing is counted, and its own lists are only counted, to be walked in turn.
	modeReread
)

type decoder struct {
	s        scanner
	base     int    // the offset in the body of s's input (a list read again from the body)
	b        []byte // the body
	body     string // the body as a string: the strings decoded are its substrings
	err      *apiError
	path     []pathElem // where the decoder is, for error messages
	mode     mode
	storeMax int  // the most messages, tools or blocks kept in storage, each
	stored   int  // the blocks taken from storage
	nblocks  int  // content blocks read, at every level: maxBlocks bounds them
	scratch  bool // the scratch values below were used, and are cleared on release

	// Storage reused from request to request (decoders are pooled).
	pathBuf   [16]pathElem
	blockSlab slab[block]
	strs      slab[string]
	ints      slab[int64]
	floats    slab[float64]
	bools     [2]bool // false, true: what the *bool fields point to
	msgs      []inMessage
	tools     []toolParam
	used      int // the most messages or tools decoded into msgs and tools

	// Where an element of a list read from the body is decoded: a block for each level of
	// content nesting (the walk of a tool result's blocks runs inside the walk of its turn's), a
	// message and a tool.
	blockScratch [maxNesting + 1]block
	msgScratch   inMessage
	toolScratch  toolParam
}

// decoders holds decoders between requests: a decoder's slabs are reused once they are cleared.
var decoders = sync.Pool{New: func() any { return &decoder{bools: [2]bool{false, true}} }}

func newDecoder() *decoder {
	d := decoders.Get().(*decoder)
	d.path = d.pathBuf[:0]
	d.storeMax = maxPooled
	return d
}

// maxPooled bounds what a pooled decoder keeps (the values of each slab, messages, tools): one
// huge request does not leave its storage behind for good (256 blocks are 128 KB). It is also
// what one request stores: lists past it are read from the body (walk).
const maxPooled = 256

// release clears d (nothing of a request stays reachable from the pool) and pools it.
func (d *decoder) release() {
	d.s, d.base, d.b, d.body, d.err, d.path, d.mode, d.stored, d.nblocks = scanner{}, 0, nil, "", nil, nil, modeStore, 0, 0
	clear(d.pathBuf[:])
	if d.scratch {
		clear(d.blockScratch[:])
		d.msgScratch, d.toolScratch, d.scratch = inMessage{}, toolParam{}, false
	}
	ok := d.blockSlab.reset(maxPooled) && d.strs.reset(maxPooled) &&
		d.ints.reset(maxPooled) && d.floats.reset(maxPooled) && d.used <= maxPooled
	if !ok {
		return
	}
	clear(d.msgs[:min(d.used, cap(d.msgs))])
	clear(d.tools[:min(d.used, cap(d.tools))])
	d.used = 0
	decoders.Put(d)
}

// slab hands out values that stay where they are: when its chunk is full a new one is started,
// and the values in the old one stay with whatever points at them.
type slab[T any] struct{ buf []T }

// take returns an empty slice with room for n values.
func (s *slab[T]) take(n int) []T {
	if cap(s.buf)-len(s.buf) < n {
		s.buf = make([]T, 0, max(16, n, 2*cap(s.buf)))
	}
	l := len(s.buf)
	s.buf = s.buf[:l+n]
	return s.buf[l : l : l+n]
}

func (s *slab[T]) new() *T { return &s.take(1)[:1][0] }

// reset zeroes the values handed out, for the chunk to be used again; false when the chunk is
// over limit (and then dropped).
func (s *slab[T]) reset(limit int) bool {
	if cap(s.buf) > limit {
		s.buf = nil
		return false
	}
	clear(s.buf)
	s.buf = s.buf[:0]
	return true
}

// list is one of the request's arrays: messages, tools, a content's blocks. Its elements are in
// items when they were stored; else (items nil, n > 0) they are read from the body at at each
// time the list is walked.
type list[T any] struct {
	items []T
	at    int  // the array's offset in the body
	n     int  // how many elements
	set   bool // the array was sent (not null)
}

// walk goes through a list's elements in order: for w := d.blocks(c); w.next(); { w.i, w.cur }.
// cur is valid until the next call: an element read from the body is decoded into the decoder's
// one value for its kind.
type walk[T any] struct {
	d     *decoder
	l     *list[T]
	read  func(d *decoder, v *T, depth int) bool
	v     *T // where an element read from the body goes
	depth int
	sc    scanner // reads the list from the body, between the decoder's reads of its elements
	i     int
	cur   *T
}

func (w *walk[T]) next() bool {
	w.i++
	if w.i >= w.l.n {
		return false
	}
	if w.l.items != nil {
		w.cur = &w.l.items[w.i]
		return true
	}
	d := w.d
	d.scratch = true
	// The list was checked when first read: its own scanner takes it up where it left it, and
	// the decoder reads the element with it (offsets in it count from the list's start).
	if w.i == 0 {
		w.sc = newScanner(d.b[w.l.at:])
		w.sc.EnterArray()
	}
	outer, base := d.s, d.base
	d.s, d.base = w.sc, w.l.at
	d.s.NextElement()
	var zero T
	*w.v = zero
	m := d.mode
	d.mode = modeReread
	w.read(d, w.v, w.depth)
	d.mode = m
	w.sc = d.s
	d.s, d.base = outer, base
	w.cur = w.v
	return true
}

func readMessage(d *decoder, m *inMessage, _ int) bool { return d.message(m) }
func readTool(d *decoder, t *toolParam, _ int) bool    { return d.tool(t) }
func readBlock(d *decoder, bl *block, depth int) bool  { return d.block(bl, depth) }

// storedList reads the array at the scanner into l, at most maxN elements (more is a 400 naming
// member): the first storeMax into storage (*pool, kept for the next request if it grew), each
// later one only checked, into scratch, and left in the body for walk to read again, so that a
// list's memory does not grow with its length.
func storedList[T any](d *decoder, l *list[T], pool *[]T, scratch *T, read func(*decoder, *T, int) bool,
	maxN int, member string) bool {
	d.s.Peek()
	*l = list[T]{at: d.base + d.s.Offset(), set: true}
	items := (*pool)[:0]
	store := true
	var zero T
	ok := d.array(func(int) bool {
		if l.n == maxN {
			d.err = invalid(member + ": at most " + strconv.Itoa(maxN) + " " + member + " are allowed")
			return false
		}
		l.n++
		if store = store && len(items) < d.storeMax; store {
			items = append(items, zero)
			d.used = max(d.used, len(items))
			return read(d, &items[len(items)-1], 0)
		}
		d.mode, d.scratch = modeCheck, true
		*scratch = zero
		ok := read(d, scratch, 0)
		d.mode = modeStore
		return ok
	})
	if store {
		l.items = items
	}
	if cap(items) > cap(*pool) {
		*pool = items[:0]
	}
	return ok
}

func (d *decoder) messages(l *list[inMessage]) walk[inMessage] {
	return walk[inMessage]{d: d, l: l, read: readMessage, v: &d.msgScratch, i: -1}
}

func (d *decoder) toolList(l *list[toolParam]) walk[toolParam] {
	return walk[toolParam]{d: d, l: l, read: readTool, v: &d.toolScratch, i: -1}
}

// blocks walks c's blocks (none when c is a string).
func (d *decoder) blocks(c *content) walk[block] {
	return walk[block]{d: d, l: &c.blocks, read: readBlock, v: &d.blockScratch[c.depth], depth: c.depth, i: -1}
}

type pathElem struct {
	key string
	idx int // when key is ""
}

func (d *decoder) push(key string) { d.path = append(d.path, pathElem{key: key}) }
func (d *decoder) pushIdx(i int)   { d.path = append(d.path, pathElem{idx: i}) }
func (d *decoder) pop()            { d.path = d.path[:len(d.path)-1] }

func (d *decoder) where() string {
	var b strings.Builder
	for i, p := range d.path {
		if i > 0 {
			b.WriteByte('.')
		}
		if p.key != "" {
			b.WriteString(p.key)
		} else {
			b.WriteString(strconv.Itoa(p.idx))
		}
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

func (d *decoder) syntax() {
	switch err := d.s.Err(); {
	case d.err != nil:
	case errors.Is(err, jsonwire.ErrTooDeep):
		d.err = invalid("The request body is nested deeper than " + strconv.Itoa(maxDepth) + " levels (at byte " + strconv.Itoa(d.base+d.s.at(err)) + ").")
	default:
		d.err = invalid("The request body is not valid JSON (at byte " + strconv.Itoa(d.base+d.s.at(err)) + ").")
	}
}

// at is where the scanner found err, as this decoder has always named the byte in its message:
// jsonwire's offset, but for a malformed number its first byte, and for a string cut short
// just after a backslash that backslash.
func (s *scanner) at(err error) int {
	var se *jsonwire.SyntaxError
	if !errors.As(err, &se) {
		return s.Offset()
	}
	b, i := s.Input(), se.Offset
	switch se.Fault {
	case jsonwire.FaultBadNumber:
		for i > 0 && strings.IndexByte("+-.0123456789Ee", b[i-1]) >= 0 {
			i--
		}
	case jsonwire.FaultUnterminatedString:
		n := 0 // the backslashes that end the input
		for n < i && b[i-1-n] == '\\' {
			n++
		}
		if i == len(b) && n%2 == 1 {
			i--
		}
	}
	return i
}

// typeErr records that the value at the current path is not of kind.
func (d *decoder) typeErr(kind string) bool {
	if d.err == nil {
		d.err = invalid(d.where() + ": Input should be a valid " + kind)
	}
	return false
}

// object walks an object, calling field with each member's key (unquoted), the scanner at its
// value. A null object is no members. field returns false to stop.
func (d *decoder) object(field func(key string) bool) bool {
	s := &d.s
	switch s.Peek() {
	case 'n':
		if s.ReadNull() {
			return true
		}
	case '{':
	default:
		return d.typeErr("object")
	}
	ok := s.EnterObject() == nil
	for ok {
		key, more, err := s.NextMember()
		if err != nil {
			ok = false
			break
		}
		if !more {
			break
		}
		k := d.text(key)
		d.push(k)
		ok = field(k) && !s.bad()
		d.pop()
	}
	if !ok && d.err == nil {
		d.syntax()
	}
	return ok
}

// unknown refuses a member this package does not know.
func (d *decoder) unknown() bool {
	if d.err == nil {
		d.err = invalid(d.where() + ": Extra inputs are not permitted")
	}
	return false
}

// array walks an array, elem called with the scanner at each element.
func (d *decoder) array(elem func(i int) bool) bool {
	s := &d.s
	if s.Peek() != '[' {
		return d.typeErr("list")
	}
	ok := s.EnterArray() == nil
	for i := 0; ok; i++ {
		more, err := s.NextElement()
		if err != nil {
			ok = false
			break
		}
		if !more {
			break
		}
		d.pushIdx(i)
		ok = elem(i) && !s.bad()
		d.pop()
	}
	if !ok && d.err == nil {
		d.syntax()
	}
	return ok
}

// null consumes a null; encoding/json's rule holds: null leaves a field unset.
func (d *decoder) null() bool { return d.s.ReadNull() }

func (d *decoder) str(dst *string) bool {
	if d.null() {
		return true
	}
	if d.s.Peek() != '"' {
		return d.typeErr("string")
	}
	t, err := d.s.ReadString()
	if err != nil {
		d.syntax()
		return false
	}
	if d.mode != modeCheck {
		*dst = d.text(t)
	}
	return true
}

// text is the string a literal the scanner read holds: a substring of d.body unless it has
// escapes.
func (d *decoder) text(t jsonwire.Token) string {
	if t.Flags&jsonwire.Escaped == 0 {
		return d.body[d.base+t.Start+1 : d.base+t.End-1]
	}
	return unescape(t.Contents(d.s.Input()))
}

func (d *decoder) strPtr(dst **string) bool {
	if d.null() {
		return true
	}
	var v string
	if !d.str(&v) {
		return false
	}
	if d.mode == modeCheck {
		return true
	}
	p := d.strs.new()
	*p = v
	*dst = p
	return true
}

func (d *decoder) boolean(dst *bool) bool {
	switch d.s.Peek() {
	case 'n':
		if d.null() {
			return true
		}
	case 't', 'f':
		if v, err := d.s.ReadBool(); err == nil {
			*dst = v
			return true
		}
	}
	return d.typeErr("boolean")
}

func (d *decoder) boolPtr(dst **bool) bool {
	if d.null() {
		return true
	}
	var v bool
	if !d.boolean(&v) {
		return false
	}
	if v {
		*dst = &d.bools[1]
	} else {
		*dst = &d.bools[0]
	}
	return true
}

// number returns the number token as a substring of d.body ("" when there is none).
func (d *decoder) number(kind string) string {
	c := d.s.Peek()
	if c != '-' && (c < '0' || c > '9') {
		d.typeErr(kind)
		return ""
	}
	t, err := d.s.ReadNumber()
	if err != nil {
		d.syntax()
		return ""
	}
	return d.body[d.base+t.Start : d.base+t.End]
}

func (d *decoder) intPtr(dst **int64) bool {
	if d.null() {
		return true
	}
	tok := d.number("integer")
	if tok == "" {
		return false
	}
	v, err := strconv.ParseInt(tok, 10, 64)
	if err != nil {
		return d.typeErr("integer")
	}
	p := d.ints.new()
	*p = v
	*dst = p
	return true
}

func (d *decoder) floatPtr(dst **float64) bool {
	if d.null() {
		return true
	}
	tok := d.number("number")
	if tok == "" {
		return false
	}
	v, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return d.typeErr("number")
	}
	p := d.floats.new()
	*p = v
	*dst = p
	return true
}

// raw keeps a value as its JSON text (null as nothing).
func (d *decoder) raw(dst *json.RawMessage) bool {
	if d.null() {
		return true
	}
	// The scanner counts the value's depth from the top of the request: the objects and arrays
	// around it (as many as the path is long) and its own.
	t, err := d.s.ReadValue()
	if err != nil {
		if errors.Is(err, jsonwire.ErrTooDeep) && d.err == nil {
			d.err = invalid(d.where() + ": nested deeper than " + strconv.Itoa(maxDepth) + " levels")
		}
		d.syntax()
		return false
	}
	*dst = t.Raw(d.s.Input())
	return true
}

// strings decodes a list of at most limit strings (what refuses the one past the limit says
// so).
func (d *decoder) strings(dst *[]string, limit int, tooMany string) bool {
	if d.null() {
		return true
	}
	return d.array(func(int) bool {
		if len(*dst) == limit {
			d.err = invalid(tooMany)
			return false
		}
		var v string
		if !d.str(&v) {
			return false
		}
		*dst = append(*dst, v)
		return true
	})
}

func (d *decoder) request(r *msgRequest) {
	d.object(func(key string) bool {
		switch key {
		case "model":
			return d.strPtr(&r.Model)
		case "max_tokens":
			return d.intPtr(&r.MaxTokens)
		case "messages":
			if d.null() {
				return true
			}
			return storedList(d, &r.Messages, &d.msgs, &d.msgScratch, readMessage, maxMessages, "messages")
		case "system":
			return d.content(&r.System, 0)
		case "metadata":
			if d.null() {
				return true
			}
			r.Metadata = &metadata{}
			return d.object(func(key string) bool {
				if key == "user_id" {
					return d.strPtr(&r.Metadata.UserID)
				}
				return d.unknown()
			})
		case "stop_sequences":
			return d.strings(&r.StopSequences, maxStops, "stop_sequences: at most "+strconv.Itoa(maxStops)+" are allowed")
		case "stream":
			return d.boolPtr(&r.Stream)
		case "temperature":
			return d.floatPtr(&r.Temperature)
		case "top_p":
			return d.floatPtr(&r.TopP)
		case "top_k":
			return d.intPtr(&r.TopK)
		case "thinking":
			if d.null() {
				return true
			}
			r.Thinking = &thinkingParam{}
			return d.object(func(key string) bool {
				switch key {
				case "type":
					return d.str(&r.Thinking.Type)
				case "budget_tokens":
					var n *int64
					if !d.intPtr(&n) {
						return false
					}
					if n != nil {
						r.Thinking.BudgetTokens = *n
					}
					return true
				case "display":
					return d.str(&r.Thinking.Display)
				}
				return d.unknown()
			})
		case "tools":
			if d.null() {
				return true
			}
			return storedList(d, &r.Tools, &d.tools, &d.toolScratch, readTool, maxTools, "tools")
		case "tool_choice":
			if d.null() {
				return true
			}
			r.ToolChoice = &toolChoice{}
			return d.object(func(key string) bool {
				switch key {
				case "type":
					return d.str(&r.ToolChoice.Type)
				case "name":
					return d.str(&r.ToolChoice.Name)
				case "disable_parallel_tool_use":
					return d.boolean(&r.ToolChoice.DisableParallelToolUse)
				}
				return d.unknown()
			})
		case "service_tier":
			return d.strPtr(&r.ServiceTier)
		case "output_config":
			if d.null() {
				return true
			}
			r.OutputConfig = &outputConfig{}
			return d.outputConfig(r.OutputConfig)
		case "cache_control":
			return d.raw(&r.CacheControl)
		case "speed":
			return d.raw(&r.Speed)
		case "diagnostics":
			return d.raw(&r.Diagnostics)
		case "container":
			return d.raw(&r.Container)
		case "mcp_servers":
			return d.raw(&r.MCPServers)
		case "context_management":
			return d.raw(&r.ContextManagement)
		case "inference_geo":
			return d.raw(&r.InferenceGeo)
		}
		return d.unknown()
	})
}

func (d *decoder) outputConfig(oc *outputConfig) bool {
	return d.object(func(key string) bool {
		switch key {
		case "effort":
			return d.str(&oc.Effort)
		case "format":
			if d.null() {
				return true
			}
			oc.Format = &outputFormat{}
			return d.object(func(key string) bool {
				switch key {
				case "type":
					return d.str(&oc.Format.Type)
				case "schema":
					return d.raw(&oc.Format.Schema)
				}
				return d.unknown()
			})
		}
		return d.unknown()
	})
}

func (d *decoder) message(m *inMessage) bool {
	return d.object(func(key string) bool {
		switch key {
		case "role":
			return d.str(&m.Role)
		case "content":
			return d.content(&m.Content, 0)
		}
		return d.unknown()
	})
}

// maxNesting bounds content inside content (a tool result's blocks, a document's): a message's
// or the system prompt's is at depth 0, a tool result's in it at 1, and so on. Anthropic's own
// schema nests two deep (a document in a tool result); four leaves room and bounds the decoder's
// recursion and its scratch values.
const maxNesting = 4

// maxBlocks bounds the content blocks of one request, counted at every depth. A block read from
// the body costs no memory beyond its bytes, but every walk of it costs a decoding: the cap
// bounds that work (a request at the cap translates in 25-45 ms; it took 0.1-4 s). It is generous:
// as many blocks as Anthropic allows messages, more than a 1M-token context holds at ten tokens
// a block, where Claude Code sends a few hundred to a few thousand.
const maxBlocks = 100_000

// content decodes a content (a string or a list of blocks) at depth; null leaves it unset.
func (d *decoder) content(c *content, depth int) bool {
	if d.null() {
		return true
	}
	if depth > maxNesting {
		d.err = invalid(d.where() + ": content is nested deeper than " + strconv.Itoa(maxNesting) + " levels (a tool result's or a document's content inside another)")
		return false
	}
	*c = content{set: true, depth: depth}
	switch d.s.Peek() {
	case '"':
		c.isText = true
		return d.str(&c.text)
	case '[':
	default:
		return d.typeErr("list")
	}
	l := &c.blocks
	l.at, l.set = d.base+d.s.Offset(), true
	if d.mode == modeReread {
		// Checked when first read: only counted, for the walks to come.
		if d.s.enterArray() {
			for d.s.element() {
				l.n++
				d.s.skip()
			}
		}
		return !d.s.bad()
	}
	store := d.mode == modeStore
	var items []block
	if store {
		items, store = d.take(2)
	}
	return d.array(func(int) bool {
		if d.nblocks == maxBlocks {
			d.err = invalid(d.where() + ": more than " + strconv.Itoa(maxBlocks) + " content blocks in the request")
			return false
		}
		d.nblocks++
		l.n++
		if store && len(items) == cap(items) {
			// Grown in the slab: nothing points into items while it grows (a block's own
			// content is another slice of the slab).
			var more []block
			if more, store = d.take(2 * cap(items)); store {
				items = append(more, items...)
			}
		}
		if store {
			items = items[:len(items)+1]
			l.items = items
			return d.block(&items[len(items)-1], depth)
		}
		// Past storeMax: the blocks are read from the body.
		l.items = nil
		m := d.mode
		d.mode, d.scratch = modeCheck, true
		bl := &d.blockScratch[depth]
		*bl = block{}
		ok := d.block(bl, depth)
		d.mode = m
		return ok
	})
}

// take returns room for n blocks from storage; false when that would pass storeMax.
func (d *decoder) take(n int) ([]block, bool) {
	if d.stored+n > d.storeMax {
		return nil, false
	}
	d.stored += n
	return d.blockSlab.take(n), true
}

func (d *decoder) block(bl *block, depth int) bool {
	return d.object(func(key string) bool {
		switch key {
		case "type":
			return d.str(&bl.Type)
		case "text":
			return d.str(&bl.Text)
		case "cache_control":
			return d.raw(&bl.CacheControl)
		case "citations":
			return d.raw(&bl.Citations)
		case "source":
			if d.null() {
				return true
			}
			bl.Source = source{set: true}
			return d.source(&bl.Source, depth)
		case "title":
			return d.str(&bl.Title)
		case "context":
			return d.str(&bl.Context)
		case "id":
			return d.str(&bl.ID)
		case "name":
			return d.str(&bl.Name)
		case "input":
			return d.raw(&bl.Input)
		case "caller":
			return d.raw(&bl.Caller)
		case "tool_use_id":
			return d.str(&bl.ToolUseID)
		case "content":
			return d.content(&bl.Content, depth+1)
		case "is_error":
			return d.boolean(&bl.IsError)
		case "thinking":
			return d.str(&bl.Thinking)
		case "signature":
			return d.str(&bl.Signature)
		case "data":
			return d.str(&bl.Data)
		}
		return d.unknown()
	})
}

func (d *decoder) source(s *source, depth int) bool {
	return d.object(func(key string) bool {
		switch key {
		case "type":
			return d.str(&s.Type)
		case "media_type":
			return d.str(&s.MediaType)
		case "data":
			return d.str(&s.Data)
		case "url":
			return d.str(&s.URL)
		case "file_id":
			return d.str(&s.FileID)
		case "content":
			return d.content(&s.Content, depth+1)
		}
		return d.unknown()
	})
}

func (d *decoder) tool(t *toolParam) bool {
	return d.object(func(key string) bool {
		switch key {
		case "type":
			return d.str(&t.Type)
		case "name":
			return d.str(&t.Name)
		case "description":
			return d.strPtr(&t.Description)
		case "input_schema":
			return d.raw(&t.InputSchema)
		case "strict":
			return d.boolPtr(&t.Strict)
		case "cache_control":
			return d.raw(&t.CacheControl)
		case "eager_input_streaming":
			return d.boolPtr(&t.EagerInputStreaming)
		case "input_examples":
			return d.raw(&t.InputExamples)
		case "defer_loading":
			return d.boolPtr(&t.DeferLoading)
		case "allowed_callers":
			return d.raw(&t.AllowedCallers)
		}
		return d.unknown()
	})
}

// interned are the strings requests repeat (keys, roles, block and source types): unquoting
// one of them returns the constant instead of allocating a copy. Read-only after init.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range strings.Fields(`model max_tokens messages system metadata user_id stop_sequences stream temperature
		top_p top_k thinking tools tool_choice service_tier output_config cache_control role content type text
		citations source title context id name input caller tool_use_id is_error signature data media_type url
		file_id description input_schema strict user assistant image document tool_use tool_result
		redacted_thinking base64 ephemeral auto any none tool enabled disabled adaptive budget_tokens
		image/jpeg image/png image/gif image/webp application/pdf text/plain custom format effort schema json_schema
		disable_parallel_tool_use ttl 5m 1h`) {
		m[s] = s
	}
	return m
}()

// unquote is the string a valid JSON string literal (as the scanner returns it, quotes
// included) holds: the interned constant for the strings requests repeat; invalid surrogates
// become U+FFFD, as encoding/json has them, and other bytes stay as they are.
func unquote(raw []byte) string {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		if s, ok := interned[string(in)]; ok {
			return s
		}
		return string(in)
	}
	return unescape(in)
}

// unescape is the value of a string literal's contents that hold an escape.
func unescape(in []byte) string {
	s, _ := jsonwire.UnescapeString(in, jsonwire.KeepInvalid) // checked by the scanner
	return s
}
