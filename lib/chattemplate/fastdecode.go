package chattemplate

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonscan"
)

// decodeFast reads a valid request in one pass over its bytes, without reflection (encoding/json
// into structs took a fifth of a context-length check). It gives up (nil) on anything it does
// not take exactly as decodeChecked would, which then decides and words the error: bad JSON, a
// value of the wrong type, a key that only matches a field in another letter case or is written
// with escapes, a key repeated in an object it reads, nesting deeper than maxFastDepth. What it
// does return, decodeChecked reads alike (FuzzDecodeRequest holds it to that).
func decodeFast(body []byte) *Input {
	r := &fastReader{b: body, ok: true}
	in := &Input{AddGenerationPrompt: true}
	var msgs []fastMessage
	var tools []fastTool
	var seen uint8
	if !r.object(func(key string) bool {
		var bit uint8
		switch key {
		case "messages":
			bit = 1
			msgs = r.messages()
		case "tools":
			bit = 2
			tools, in.Tools = r.tools()
		case "documents":
			bit = 4
			in.Documents = r.documents()
		case "chat_template_kwargs":
			bit = 8
			in.Kwargs = r.kwargs()
		case "add_generation_prompt":
			bit = 16
			if b, ok := r.boolPtr(); ok && b != nil {
				in.AddGenerationPrompt = *b
			}
		default:
			r.skip()
			return r.ok
		}
		if seen&bit != 0 {
			r.ok = false
		}
		seen |= bit
		return r.ok
	}, requestKeys) || !r.end() {
		return nil
	}
	if len(msgs) == 0 {
		return nil
	}
	in.Messages = make([]Message, len(msgs))
	// The strings Message points to, in one allocation.
	n := 0
	for i := range msgs {
		w := &msgs[i]
		n += w.content.n() + w.toolCallID.n() + max(w.reasoning.n(), w.reasoningContent.n())
	}
	cells := make([]string, 0, n)
	ptr := func(o optString) *string {
		if !o.set {
			return nil
		}
		cells = append(cells, o.s) // within cells' capacity: earlier pointers stay valid
		return &cells[len(cells)-1]
	}
	for i := range msgs {
		w := &msgs[i]
		if !w.role.set || !roles[w.role.s] {
			return nil
		}
		m := &in.Messages[i]
		m.Role, m.Content, m.Parts = w.role.s, ptr(w.content), w.parts
		if m.Content == nil && m.Parts == nil && m.Role != "assistant" {
			return nil
		}
		m.Name = w.name.s
		m.ToolCallID = ptr(w.toolCallID)
		if w.reasoning.set {
			m.Reasoning = ptr(w.reasoning)
		} else {
			m.Reasoning = ptr(w.reasoningContent)
		}
		if len(w.toolCalls) > 0 {
			m.ToolCalls = make([]ToolCall, len(w.toolCalls))
			for j, c := range w.toolCalls {
				if !c.hasFunction || c.name == "" {
					return nil
				}
				tc := ToolCall{ID: c.id, Type: c.typ, Function: FunctionCall{Name: c.name}}
				args := bytes.TrimSpace(c.arguments)
				switch {
				case len(args) > 0 && args[0] == '"':
					s, ok := unquote(args) // checked by the reader
					if !ok {
						return nil
					}
					tc.Function.Arguments = s
				case len(args) > 0 && (args[0] == '{' || args[0] == '['):
					tc.Function.Arguments = string(args)
				}
				m.ToolCalls[j] = tc
			}
		}
	}
	for i, t := range tools {
		if t.typ != "function" || !t.hasFunction || t.name == nil || *t.name == "" {
			return nil
		}
		if p := bytes.TrimSpace(t.parameters); len(p) > 0 && !bytes.Equal(p, []byte("null")) && !isJSONObject(p) {
			return nil
		}
		in.Tools[i] = Tool{Type: t.typ, Function: FunctionDef{Name: *t.name, Description: t.description, Parameters: t.parameters, Strict: t.strict}}
	}
	for _, d := range in.Documents {
		if !isJSONObject(d) {
			return nil
		}
	}
	return in
}

var requestKeys = []string{"messages", "tools", "documents", "chat_template_kwargs", "add_generation_prompt"}

// What the fast reader keeps of a message, a tool call and a tool, field for field what
// decodeChecked's structs keep (pointers where it tells absent or null from empty).
type fastMessage struct {
	role, name, toolCallID, reasoning, reasoningContent optString
	content                                             optString // a string content
	parts                                               []ContentPart
	toolCalls                                           []fastToolCall
}

// optString is a *string field without its allocation: absent or null (set false) or a string.
type optString struct {
	s   string
	set bool
}

func (o optString) n() int {
	if o.set {
		return 1
	}
	return 0
}

type fastToolCall struct {
	id, typ, name string
	hasFunction   bool
	arguments     []byte
}

type fastTool struct {
	typ               string
	hasFunction       bool
	name, description *string
	parameters        json.RawMessage
	strict            *bool
}

// maxFastDepth bounds the nesting the fast reader skips through; deeper requests go to
// encoding/json, which has its own bound.
const maxFastDepth = 512

// fastReader checks and reads JSON as encoding/json does. ok turns false for good at the first
// thing it does not take.
type fastReader struct {
	b  []byte
	i  int
	ok bool
	// s is b as a string, made at the first string read that needs its own bytes: the strings
	// without escapes are then slices of it, one allocation for all of them (a chat's dozens
	// of contents) rather than one each. Only for bodies up to maxShared bytes, so that a big
	// body with a few short strings is not copied whole.
	s string
	// simple: the string scanString last passed has no escape and no byte above 0x7F (it is
	// its own value, and valid UTF-8).
	simple bool
}

// maxShared bounds the bodies whose strings share one copy of the body.
const maxShared = 1 << 20

func (r *fastReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek returns the next byte that is not whitespace (0 at the end).
func (r *fastReader) peek() byte {
	r.ws()
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// end reports whether only whitespace is left, and all went well.
func (r *fastReader) end() bool {
	r.ws()
	return r.ok && r.i == len(r.b)
}

// object reads an object, the top of the request.
func (r *fastReader) object(field func(key string) bool, known []string) bool {
	if r.peek() != '{' {
		return false
	}
	return r.fields(field, known)
}

// fields reads the object whose '{' is next, calling field for each key, which must read the
// value. A key equal to none of known but to one of them in another letter case (encoding/json
// would take it for that field), or written with an escape, stops the reader; field gets any
// other key as "" and should skip its value.
func (r *fastReader) fields(field func(key string) bool, known []string) bool {
	r.i++ // '{'
	if r.peek() == '}' {
		r.i++
		return true
	}
	for {
		if r.peek() != '"' {
			r.ok = false
			return false
		}
		start := r.i + 1
		if !r.scanString() {
			return false
		}
		key := r.b[start : r.i-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			r.ok = false
			return false
		}
		k := ""
		for _, name := range known {
			if string(key) == name {
				k = name
				break
			}
			if strings.EqualFold(string(key), name) {
				r.ok = false
				return false
			}
		}
		if r.peek() != ':' {
			r.ok = false
			return false
		}
		r.i++
		if !field(k) {
			r.ok = false
			return false
		}
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return true
		default:
			r.ok = false
			return false
		}
	}
}

// array reads an array (the reader must be at its '['), calling elem for each element.
func (r *fastReader) array(elem func() bool) bool {
	r.i++ // '['
	if r.peek() == ']' {
		r.i++
		return true
	}
	for {
		r.ws()
		if !elem() {
			r.ok = false
			return false
		}
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			r.i++
			return true
		default:
			r.ok = false
			return false
		}
	}
}

// null reads a null if one is next.
func (r *fastReader) null() bool {
	if r.peek() == 'n' && bytes.HasPrefix(r.b[r.i:], []byte("null")) {
		r.i += 4
		return true
	}
	return false
}

// scanString moves past the string at r.i (its opening quote), checking it as encoding/json's
// scanner does: no control characters, only JSON's escapes. Invalid UTF-8 is allowed. It skips
// eight bytes at a time while none of them ends the string, escapes or is a control character,
// and, until it has seen one, is above 0x7F (r.simple).
func (r *fastReader) scanString() bool {
	b := r.b
	i := r.i + 1
	r.simple = true
	for {
		if r.simple {
			i = jsonscan.SkipPlainASCII(b, i)
		} else {
			i = jsonscan.SkipPlain(b, i) // text outside ASCII: no stop at each such byte
		}
		if i >= len(b) {
			r.ok = false
			return false
		}
		switch c := b[i]; {
		case c == '"':
			r.i = i + 1
			return true
		case c < 0x20:
			r.ok = false
			return false
		case c == '\\':
			r.simple = false
			if i+1 >= len(b) {
				r.ok = false
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(b[i+2:]); !ok {
					r.ok = false
					return false
				}
				i += 6
			default:
				r.ok = false
				return false
			}
		default:
			if c >= utf8.RuneSelf {
				r.simple = false
			}
			i++
		}
	}
}

// str reads a string as encoding/json reads it into a Go string.
func (r *fastReader) str() (string, bool) {
	if r.peek() != '"' {
		r.ok = false
		return "", false
	}
	start := r.i
	if !r.scanString() {
		return "", false
	}
	lit := r.b[start:r.i]
	if body := lit[1 : len(lit)-1]; r.simple || bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		switch string(body) { // the strings of every request, without an allocation
		case "system":
			return "system", true
		case "user":
			return "user", true
		case "assistant":
			return "assistant", true
		case "tool":
			return "tool", true
		case "text":
			return "text", true
		case "function":
			return "function", true
		}
		if len(r.b) > maxShared {
			return string(body), true
		}
		if r.s == "" {
			r.s = string(r.b)
		}
		return r.s[start+1 : r.i-1], true
	}
	s, ok := unquote(lit)
	if !ok {
		r.ok = false
	}
	return s, ok
}

// opt reads a string or null into a *string field.
func (r *fastReader) opt() (optString, bool) {
	if r.null() {
		return optString{}, true
	}
	s, ok := r.str()
	return optString{s, true}, ok
}

// strPtr reads a string or null into a *string field.
func (r *fastReader) strPtr() (*string, bool) {
	if r.null() {
		return nil, true
	}
	s, ok := r.str()
	if !ok {
		return nil, false
	}
	return &s, true
}

// strField reads a string or null into a string field (null leaves it "").
func (r *fastReader) strField() (string, bool) {
	if r.null() {
		return "", true
	}
	return r.str()
}

// boolPtr reads true, false or null into a *bool field.
func (r *fastReader) boolPtr() (*bool, bool) {
	r.ws()
	rest := r.b[r.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		r.i += 4
		v := true
		return &v, true
	case bytes.HasPrefix(rest, []byte("false")):
		r.i += 5
		v := false
		return &v, true
	case r.null():
		return nil, true
	}
	r.ok = false
	return nil, false
}

// raw reads any value and returns a copy of its bytes, as json.RawMessage does ("null"
// included).
func (r *fastReader) raw() json.RawMessage {
	r.ws()
	start := r.i
	if !r.skip() {
		return nil
	}
	return append(json.RawMessage(nil), r.b[start:r.i]...)
}

// skip moves past one value, checking it.
func (r *fastReader) skip() bool {
	var isObject [maxFastDepth / 64]uint64 // per open container: an object (else an array)
	depth := 0
value:
	for {
		switch c := r.peek(); {
		case c == '{' || c == '[':
			if depth == maxFastDepth {
				r.ok = false
				return false
			}
			closer := byte(']')
			if c == '{' {
				isObject[depth/64] |= 1 << (depth % 64)
				closer = '}'
			} else {
				isObject[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			r.i++
			if r.peek() == closer {
				r.i++
				depth--
				break // an empty container is a value that ended
			}
			if c == '{' && !r.key() {
				return false
			}
			continue value
		case c == '"':
			if !r.scanString() {
				return false
			}
		case c == 't' && bytes.HasPrefix(r.b[r.i:], []byte("true")):
			r.i += 4
		case c == 'f' && bytes.HasPrefix(r.b[r.i:], []byte("false")):
			r.i += 5
		case c == 'n' && bytes.HasPrefix(r.b[r.i:], []byte("null")):
			r.i += 4
		case c == '-' || c >= '0' && c <= '9':
			if !r.number() {
				return false
			}
		default:
			r.ok = false
			return false
		}
		// A value ended: go on to the next one of its container, or close the container.
		for depth > 0 {
			object := isObject[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch c := r.peek(); {
			case c == ',':
				r.i++
				if object && !r.key() {
					return false
				}
				continue value
			case c == '}' && object, c == ']' && !object:
				r.i++
				depth--
			default:
				r.ok = false
				return false
			}
		}
		return true
	}
}

// key moves past an object's key and the ':' after it.
func (r *fastReader) key() bool {
	if r.peek() != '"' || !r.scanString() || r.peek() != ':' {
		r.ok = false
		return false
	}
	r.i++
	return true
}

// number moves past a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *fastReader) number() bool {
	b, i := r.b, r.i
	digits := func() bool {
		j := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		r.ok = false
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			r.ok = false
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			r.ok = false
			return false
		}
	}
	r.i = i
	return true
}

// messages reads the messages: null or an array of objects.
func (r *fastReader) messages() []fastMessage {
	if r.null() {
		return nil
	}
	if r.peek() != '[' {
		r.ok = false
		return nil
	}
	// Room for as many messages as the rest of the body has objects, up to a bound: a hint,
	// which a body of braces must not turn into memory. A one-byte count is a vector loop;
	// counting "role" keys was a sixth of the decoding of a 29-message chat.
	n := bytes.Count(r.b[r.i:], []byte{'{'})
	if n > 32 {
		// Braces in code, schemas or parts: count the "role" keys instead (inside a string
		// their quotes would be escaped), slower but not misled.
		n = bytes.Count(r.b[r.i:], []byte(`"role"`))
	}
	msgs := make([]fastMessage, 0, min(256, max(1, n)))
	r.array(func() bool {
		if r.peek() != '{' {
			return false
		}
		msgs = append(msgs, fastMessage{})
		return r.message(&msgs[len(msgs)-1])
	})
	return msgs
}

var messageKeys = []string{"role", "content", "name", "tool_calls", "tool_call_id", "reasoning", "reasoning_content"}

func (r *fastReader) message(m *fastMessage) bool {
	var seen uint8
	return r.fields(func(key string) bool {
		var bit uint8
		ok := true
		switch key {
		case "role":
			bit = 1
			m.role, ok = r.opt()
		case "content":
			bit = 2
			ok = r.content(m)
		case "name":
			bit = 4
			m.name, ok = r.opt()
		case "tool_calls":
			bit = 8
			m.toolCalls, ok = r.toolCalls()
		case "tool_call_id":
			bit = 16
			m.toolCallID, ok = r.opt()
		case "reasoning":
			bit = 32
			m.reasoning, ok = r.opt()
		case "reasoning_content":
			bit = 64
			m.reasoningContent, ok = r.opt()
		default:
			return r.skip()
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return ok
	}, messageKeys)
}

var partKeys = []string{"type", "text"}

// content reads a message's content: null, a string, or text parts.
func (r *fastReader) content(m *fastMessage) bool {
	switch r.peek() {
	case 'n':
		return r.null()
	case '"':
		s, ok := r.str()
		m.content = optString{s, true}
		return ok
	case '[':
		m.parts = make([]ContentPart, 0, 1)
		return r.array(func() bool {
			if r.peek() != '{' {
				return false
			}
			var typ, text *string
			var seen uint8
			ok := r.fields(func(key string) bool {
				var bit uint8
				ok := true
				switch key {
				case "type":
					bit = 1
					typ, ok = r.strPtr()
				case "text":
					bit = 2
					text, ok = r.strPtr()
				default:
					return r.skip()
				}
				if seen&bit != 0 {
					return false
				}
				seen |= bit
				return ok
			}, partKeys)
			if !ok || typ == nil || *typ != "text" || text == nil {
				return false // decodeChecked words what is wrong
			}
			m.parts = append(m.parts, ContentPart{Type: "text", Text: *text})
			return true
		})
	}
	return false
}

var (
	toolCallKeys     = []string{"id", "type", "function"}
	functionCallKeys = []string{"name", "arguments"}
)

func (r *fastReader) toolCalls() ([]fastToolCall, bool) {
	if r.null() {
		return nil, true
	}
	if r.peek() != '[' {
		return nil, false
	}
	var calls []fastToolCall
	ok := r.array(func() bool {
		if r.peek() != '{' {
			return false
		}
		var c fastToolCall
		var seen uint8
		ok := r.fields(func(key string) bool {
			var bit uint8
			ok := true
			switch key {
			case "id":
				bit = 1
				c.id, ok = r.strField()
			case "type":
				bit = 2
				c.typ, ok = r.strField()
			case "function":
				bit = 4
				if r.null() {
					break
				}
				if r.peek() != '{' {
					return false
				}
				c.hasFunction = true
				var fseen uint8
				ok = r.fields(func(key string) bool {
					var bit uint8
					ok := true
					switch key {
					case "name":
						bit = 1
						c.name, ok = r.strField()
					case "arguments":
						bit = 2
						c.arguments = r.raw()
						ok = r.ok
					default:
						return r.skip()
					}
					if fseen&bit != 0 {
						return false
					}
					fseen |= bit
					return ok
				}, functionCallKeys)
			default:
				return r.skip()
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			return ok
		}, toolCallKeys)
		calls = append(calls, c)
		return ok
	})
	return calls, ok
}

var (
	toolKeys        = []string{"type", "function"}
	functionDefKeys = []string{"name", "description", "parameters", "strict"}
)

// tools reads the tools: what the checks need, and the Input's slice to fill (nil for null).
func (r *fastReader) tools() ([]fastTool, []Tool) {
	if r.null() {
		return nil, nil
	}
	if r.peek() != '[' {
		r.ok = false
		return nil, nil
	}
	var tools []fastTool
	r.array(func() bool {
		if r.peek() != '{' {
			return false
		}
		var t fastTool
		var seen uint8
		ok := r.fields(func(key string) bool {
			var bit uint8
			ok := true
			switch key {
			case "type":
				bit = 1
				t.typ, ok = r.strField()
			case "function":
				bit = 2
				if r.null() {
					break
				}
				if r.peek() != '{' {
					return false
				}
				t.hasFunction = true
				var fseen uint8
				ok = r.fields(func(key string) bool {
					var bit uint8
					ok := true
					switch key {
					case "name":
						bit = 1
						t.name, ok = r.strPtr()
					case "description":
						bit = 2
						t.description, ok = r.strPtr()
					case "parameters":
						bit = 4
						t.parameters = r.raw()
						ok = r.ok
					case "strict":
						bit = 8
						t.strict, ok = r.boolPtr()
					default:
						return r.skip()
					}
					if fseen&bit != 0 {
						return false
					}
					fseen |= bit
					return ok
				}, functionDefKeys)
			default:
				return r.skip()
			}
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			return ok
		}, toolKeys)
		tools = append(tools, t)
		return ok
	})
	return tools, make([]Tool, len(tools))
}

// documents reads the documents: null or an array of values (objects, checked later).
func (r *fastReader) documents() []json.RawMessage {
	if r.null() {
		return nil
	}
	if r.peek() != '[' {
		r.ok = false
		return nil
	}
	docs := []json.RawMessage{}
	r.array(func() bool {
		d := r.raw()
		docs = append(docs, d)
		return r.ok
	})
	return docs
}

// kwargs reads chat_template_kwargs: null or an object (a key repeated: the last one, as
// encoding/json reads a map).
func (r *fastReader) kwargs() map[string]any {
	if r.null() {
		return nil
	}
	if r.peek() != '{' {
		r.ok = false
		return nil
	}
	kw := map[string]any{}
	r.i++ // '{'
	if r.peek() == '}' {
		r.i++
		return kw
	}
	for {
		k, ok := r.str()
		if !ok || r.peek() != ':' {
			r.ok = false
			return nil
		}
		r.i++
		v := r.raw()
		if !r.ok {
			return nil
		}
		kw[k] = v
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			r.i++
			return kw
		default:
			r.ok = false
			return nil
		}
	}
}
