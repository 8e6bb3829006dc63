package chattemplate

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
)

// decodeFast reads a valid request in one pass over its bytes, without reflection (encoding/json
// into structs took a fifth of a context-length check). It gives up (nil) on anything it does
// not take exactly as decodeChecked would, which then decides and words the error: bad JSON, a
// value of the wrong type, a key that only matches a field in another letter case or is written
// with escapes, a key repeated in an object it reads, nesting deeper than maxFastDepth. What it
// does return, decodeChecked reads alike (FuzzDecodeRequest holds it to that).
func decodeFast(body []byte) *Input {
	r := newFastReader(body, maxFastDepth)
	var f fastFields
	var seen uint8
	if !r.object(func(key string) bool {
		bit := f.read(r, key)
		if bit == 0 {
			return r.skip()
		}
		if seen&bit != 0 {
			r.ok = false
		}
		seen |= bit
		return r.good()
	}, requestKeys) || !r.end() {
		return nil
	}
	return f.input()
}

// decodeView reads the fields from a parsed body's members, each value with a reader of its
// own, under the same bound on nesting as decodeFast (the members sit one level down). It gives
// up (nil) where decodeFast would on a value, and where a name is one of the fields' in another
// letter case: encoding/json would take the later of the two in the source, an order the view
// does not keep. A name given twice needs no such care: the view keeps the last, and so does
// encoding/json for these fields (raw values, slices and a pointer are replaced, not merged).
func decodeView(b *openaiwire.Body) *Input {
	var f fastFields
	for name, v := range b.All() {
		k := ""
		for _, known := range requestKeys {
			if name == known {
				k = known
				break
			}
			if strings.EqualFold(name, known) {
				return nil
			}
		}
		if k == "" {
			continue
		}
		r := newFastReader(v, maxFastDepth-1)
		if f.read(r, k); !r.end() {
			return nil
		}
	}
	return f.input()
}

// fastFields is what the fast readers keep of a request's fields until they are checked.
type fastFields struct {
	msgs      []fastMessage
	tools     []fastTool
	toolDefs  []Tool // tools' entries, filled in by input
	documents []json.RawMessage
	kwargs    map[string]any
	addGen    *bool
}

// read reads field key's value, if it is one of requestKeys, and returns its bit (0 if not).
func (f *fastFields) read(r *fastReader, key string) uint8 {
	switch key {
	case "messages":
		f.msgs = r.messages()
		return 1
	case "tools":
		f.tools, f.toolDefs = r.tools()
		return 2
	case "documents":
		f.documents = r.documents()
		return 4
	case "chat_template_kwargs":
		f.kwargs = r.kwargs()
		return 8
	case "add_generation_prompt":
		f.addGen, _ = r.boolPtr()
		return 16
	}
	return 0
}

// input checks what read kept, as decodeChecked would, and builds the Input (nil: give up).
func (f *fastFields) input() *Input {
	in := &Input{AddGenerationPrompt: f.addGen == nil || *f.addGen, Tools: f.toolDefs, Documents: f.documents, Kwargs: f.kwargs}
	msgs, tools := f.msgs, f.tools
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

// maxFastDepth bounds the nesting the fast reader reads through, counted from the top of the
// request; deeper requests go to encoding/json, which has its own bound.
const maxFastDepth = 512

// fastReader checks and reads JSON as encoding/json does, on jsonwire's scanner. ok turns false
// for good at the first thing it does not take (the scanner's errors are its own).
type fastReader struct {
	sc jsonwire.Scanner
	b  []byte
	ok bool
	// s is b as a string, made at the first string read that needs its own bytes: the strings
	// without escapes are then slices of it, one allocation for all of them (a chat's dozens
	// of contents) rather than one each. Only for bodies up to maxShared bytes, so that a big
	// body with a few short strings is not copied whole.
	s string
}

func newFastReader(body []byte, depth int) *fastReader {
	return &fastReader{sc: jsonwire.NewScanner(body, jsonwire.Options{MaxDepth: depth}), b: body, ok: true}
}

// maxShared bounds the bodies whose strings share one copy of the body.
const maxShared = 1 << 20

// good reports whether all went well so far.
func (r *fastReader) good() bool { return r.ok && r.sc.Err() == nil }

// fail stops the reader.
func (r *fastReader) fail() bool {
	r.ok = false
	return false
}

// peek returns the next byte that is not whitespace (0 at the end).
func (r *fastReader) peek() byte { return r.sc.Peek() }

// end reports whether only whitespace is left, and all went well.
func (r *fastReader) end() bool { return r.ok && r.sc.Finish() == nil }

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
	if r.sc.EnterObject() != nil {
		return r.fail()
	}
	for {
		tok, more, err := r.sc.NextMember()
		if err != nil {
			return r.fail()
		}
		if !more {
			return true
		}
		if tok.Flags&jsonwire.Escaped != 0 {
			return r.fail()
		}
		key := tok.Contents(r.b)
		k := ""
		for _, name := range known {
			if string(key) == name {
				k = name
				break
			}
			if strings.EqualFold(string(key), name) {
				return r.fail()
			}
		}
		if !field(k) || r.sc.Err() != nil {
			return r.fail()
		}
	}
}

// array reads an array (the reader must be at its '['), calling elem for each element.
func (r *fastReader) array(elem func() bool) bool {
	if r.sc.EnterArray() != nil {
		return r.fail()
	}
	for {
		more, err := r.sc.NextElement()
		if err != nil {
			return r.fail()
		}
		if !more {
			return true
		}
		if !elem() || r.sc.Err() != nil {
			return r.fail()
		}
	}
}

// null reads a null if one is next.
func (r *fastReader) null() bool { return r.sc.ReadNull() }

// str reads a string as encoding/json reads it into a Go string.
func (r *fastReader) str() (string, bool) {
	tok, err := r.sc.ReadString()
	if err != nil {
		return "", r.fail()
	}
	return r.text(tok), true
}

// text is the value of the string tok, which the scanner has checked.
func (r *fastReader) text(tok jsonwire.Token) string {
	body := tok.Contents(r.b)
	if tok.Plain() || tok.Flags&jsonwire.Escaped == 0 && utf8.Valid(body) {
		switch string(body) { // the strings of every request, without an allocation
		case "system":
			return "system"
		case "user":
			return "user"
		case "assistant":
			return "assistant"
		case "tool":
			return "tool"
		case "text":
			return "text"
		case "function":
			return "function"
		}
		if len(r.b) > maxShared {
			return string(body)
		}
		if r.s == "" {
			r.s = string(r.b)
		}
		return r.s[tok.Start+1 : tok.End-1]
	}
	s, _ := jsonwire.UnescapeString(body, jsonwire.ReplaceInvalid) // checked by the scanner
	return s
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
	if r.null() {
		return nil, true
	}
	v, err := r.sc.ReadBool()
	if err != nil {
		return nil, r.fail()
	}
	return &v, true
}

// raw reads any value and returns a copy of its bytes, as json.RawMessage does ("null"
// included).
func (r *fastReader) raw() json.RawMessage {
	tok, err := r.sc.ReadValue()
	if err != nil {
		r.fail()
		return nil
	}
	return append(json.RawMessage(nil), tok.Raw(r.b)...)
}

// skip moves past one value, checking it.
func (r *fastReader) skip() bool {
	if _, err := r.sc.ReadValue(); err != nil {
		return r.fail()
	}
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
	n := bytes.Count(r.b[r.sc.Offset():], []byte{'{'})
	if n > 32 {
		// Braces in code, schemas or parts: count the "role" keys instead (inside a string
		// their quotes would be escaped), slower but not misled.
		n = bytes.Count(r.b[r.sc.Offset():], []byte(`"role"`))
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
						ok = r.good()
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
						ok = r.good()
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
		return r.good()
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
	if r.sc.EnterObject() != nil {
		r.fail()
		return nil
	}
	for {
		tok, more, err := r.sc.NextMember()
		if err != nil {
			r.fail()
			return nil
		}
		if !more {
			return kw
		}
		k := r.text(tok)
		v := r.raw()
		if !r.good() {
			return nil
		}
		kw[k] = v
	}
}
