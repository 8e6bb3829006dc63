package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The request decoder: one pass of the scanner over the body fills msgRequest, strictly (an
// unknown field, a value of the wrong type or malformed JSON is refused with the field's path),
// with raw JSON values (schemas, tool inputs) kept as slices of the body. encoding/json did the
// same in four times the time: it scans every nested value once per level of nesting.

// decodeRequest decodes body into req; the error is Anthropic's 400.
func decodeRequest(body []byte, req *msgRequest) *apiError {
	if !utf8.Valid(body) {
		return invalid("The request body is not valid UTF-8.")
	}
	d := &decoder{s: scanner{b: body}}
	d.request(req)
	if d.err == nil && d.s.peek() != 0 {
		if d.s.bad {
			d.syntax()
		} else {
			d.err = invalid("The request body must hold one JSON object.")
		}
	}
	return d.err
}

type decoder struct {
	s    scanner
	err  *apiError
	path []pathElem // where the decoder is, for error messages
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
	if d.err == nil {
		d.err = invalid("The request body is not valid JSON (at byte " + strconv.Itoa(d.s.i) + ").")
	}
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
	if s.peek() != '{' && s.peek() != 'n' {
		return d.typeErr("object")
	}
	ok := s.object(func(s *scanner, raw []byte) bool {
		key := unquote(raw)
		d.push(key)
		ok := field(key)
		d.pop()
		return ok
	})
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
	if s.peek() != '[' {
		return d.typeErr("list")
	}
	ok := s.array(func(s *scanner, i int) bool {
		d.pushIdx(i)
		ok := elem(i)
		d.pop()
		return ok
	})
	if !ok && d.err == nil {
		d.syntax()
	}
	return ok
}

// null consumes a null; encoding/json's rule holds: null leaves a field unset.
func (d *decoder) null() bool { return d.s.lit("null") }

func (d *decoder) str(dst *string) bool {
	if d.null() {
		return true
	}
	if d.s.peek() != '"' {
		return d.typeErr("string")
	}
	raw := d.s.str()
	if raw == nil {
		d.syntax()
		return false
	}
	*dst = unquote(raw)
	return true
}

func (d *decoder) strPtr(dst **string) bool {
	if d.null() {
		return true
	}
	var v string
	if !d.str(&v) {
		return false
	}
	*dst = &v
	return true
}

func (d *decoder) boolean(dst *bool) bool {
	switch {
	case d.null():
	case d.s.lit("true"):
		*dst = true
	case d.s.lit("false"):
		*dst = false
	default:
		return d.typeErr("boolean")
	}
	return true
}

func (d *decoder) boolPtr(dst **bool) bool {
	if d.null() {
		return true
	}
	var v bool
	if !d.boolean(&v) {
		return false
	}
	*dst = &v
	return true
}

// number returns the raw number token.
func (d *decoder) number(kind string) []byte {
	c := d.s.peek()
	if c != '-' && (c < '0' || c > '9') {
		d.typeErr(kind)
		return nil
	}
	start := d.s.i
	if !d.s.skip(0) {
		d.syntax()
		return nil
	}
	return d.s.b[start:d.s.i]
}

func (d *decoder) intPtr(dst **int64) bool {
	if d.null() {
		return true
	}
	tok := d.number("integer")
	if tok == nil {
		return false
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil {
		return d.typeErr("integer")
	}
	*dst = &v
	return true
}

func (d *decoder) floatPtr(dst **float64) bool {
	if d.null() {
		return true
	}
	tok := d.number("number")
	if tok == nil {
		return false
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return d.typeErr("number")
	}
	*dst = &v
	return true
}

// raw keeps a value as its JSON text (null as nothing).
func (d *decoder) raw(dst *json.RawMessage) bool {
	if d.null() {
		return true
	}
	d.s.ws()
	start := d.s.i
	if !d.s.skip(0) {
		d.syntax()
		return false
	}
	*dst = d.s.b[start:d.s.i]
	return true
}

func (d *decoder) strings(dst *[]string) bool {
	if d.null() {
		return true
	}
	return d.array(func(int) bool {
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
			r.Messages = make([]inMessage, 0, 8)
			return d.array(func(int) bool {
				if len(r.Messages) == maxMessages {
					d.err = invalid("messages: at most " + strconv.Itoa(maxMessages) + " messages are allowed")
					return false
				}
				r.Messages = append(r.Messages, inMessage{})
				return d.message(&r.Messages[len(r.Messages)-1])
			})
		case "system":
			return d.contentPtr(&r.System, 0)
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
			return d.strings(&r.StopSequences)
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
			return d.array(func(int) bool {
				if len(r.Tools) == maxTools {
					d.err = invalid("tools: at most " + strconv.Itoa(maxTools) + " tools are allowed")
					return false
				}
				r.Tools = append(r.Tools, toolParam{})
				return d.tool(&r.Tools[len(r.Tools)-1])
			})
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
			return d.contentPtr(&m.Content, 0)
		}
		return d.unknown()
	})
}

// maxNesting bounds content inside content (a tool result's blocks, a document's).
const maxNesting = 4

func (d *decoder) contentPtr(dst **content, depth int) bool {
	if d.null() {
		return true
	}
	if depth > maxNesting {
		d.err = invalid(d.where() + ": content is nested too deep")
		return false
	}
	c := &content{}
	switch d.s.peek() {
	case '"':
		c.isText = true
		if !d.str(&c.text) {
			return false
		}
	case '[':
		c.blocks = make([]block, 0, 2)
		if !d.array(func(int) bool {
			c.blocks = append(c.blocks, block{})
			return d.block(&c.blocks[len(c.blocks)-1], depth)
		}) {
			return false
		}
	default:
		return d.typeErr("list")
	}
	*dst = c
	return true
}

func (d *decoder) block(bl *block, depth int) bool {
	return d.object(func(key string) bool {
		switch key {
		case "type":
			return d.str(&bl.Type)
		case "text":
			return d.strPtr(&bl.Text)
		case "cache_control":
			return d.raw(&bl.CacheControl)
		case "citations":
			return d.raw(&bl.Citations)
		case "source":
			if d.null() {
				return true
			}
			bl.Source = &source{}
			return d.source(bl.Source, depth)
		case "title":
			return d.strPtr(&bl.Title)
		case "context":
			return d.strPtr(&bl.Context)
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
			return d.contentPtr(&bl.Content, depth+1)
		case "is_error":
			return d.boolean(&bl.IsError)
		case "thinking":
			return d.strPtr(&bl.Thinking)
		case "signature":
			return d.strPtr(&bl.Signature)
		case "data":
			return d.strPtr(&bl.Data)
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
			return d.contentPtr(&s.Content, depth+1)
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

// unquote is the string a valid JSON string literal (as the scanner returns it) holds; invalid
// surrogates become U+FFFD, as encoding/json has them.
func unquote(raw []byte) string {
	in := raw[1 : len(raw)-1]
	i := 0
	for i < len(in) && in[i] != '\\' {
		i++
	}
	if i == len(in) {
		if s, ok := interned[string(in)]; ok {
			return s
		}
		return string(in)
	}
	out := make([]byte, i, len(in))
	copy(out, in[:i])
	for i < len(in) {
		c := in[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		e := in[i+1]
		i += 2
		switch e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := rune(hex4(in[i : i+4]))
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if i+6 <= len(in) && in[i] == '\\' && in[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, rune(hex4(in[i+2:i+6]))); dec != utf8.RuneError {
						r2 = dec
						i += 6
					}
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default: // " \ /
			out = append(out, e)
		}
	}
	return string(out)
}

func hex4(b []byte) int {
	n := 0
	for _, c := range b {
		n <<= 4
		switch {
		case c >= '0' && c <= '9':
			n |= int(c - '0')
		case c >= 'a' && c <= 'f':
			n |= int(c - 'a' + 10)
		default:
			n |= int(c - 'A' + 10)
		}
	}
	return n
}
