package openaiwire

import (
	"encoding/json"
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
)

// Raw is a JSON value as it was received (a fingerprint, a stop_reason, logprobs, a usage
// object), passed through rather than decoded: the writers copy it compacted, as json.Marshal
// writes a json.RawMessage. It is an alias, not a type of its own, so that encoding/json (the
// decoders' fallback, and the callers' structs that still hold one) reads and writes it as it
// reads and writes a RawMessage, and a caller's RawMessage passes without a conversion. A Raw
// that is not valid JSON (no decoder makes one) is written as null, so the output stays JSON.
type Raw = json.RawMessage

// Options say how a writer lays out what it writes: the ways the gateway's writers of the same
// object differ and must keep differing, because clients have seen each one's bytes.
type Options struct {
	// Esc is the escaping of every string written, and of the extra escapes a Raw gets
	// (jsonwire.AppendCompact). 0 means jsonwire.EncodingJSON, which every writer these
	// replace used (json.Marshal), so that the zero Options are theirs; Minimal itself cannot
	// be asked for, and no writer of these objects uses it.
	Esc jsonwire.Escaping
	// FingerprintLast writes system_fingerprint after usage, at the end of the object, as the
	// token-input stage's answers and chunks have it; otherwise it comes after model, as
	// OpenAI, vLLM and the chat stream assembler have it.
	FingerprintLast bool
}

func (o Options) esc() jsonwire.Escaping {
	if o.Esc == 0 {
		return jsonwire.EncodingJSON
	}
	return o.Esc
}

// Usage is an answer's token counts. It has both forms the gateway writes: the upstream's
// object passed through (Raw, in the upstream's member order and with its details, as the chat
// stream assembler and a replay keep it), or counts the gateway computed or re-encoded
// (prompt, completion, total, in that order, as the token-input stage writes them). The tags
// are for reading: encoding/json decodes the counts as the stages' own usage structs did
// (details ignored); AppendJSON is the writer.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	// Raw, when not nil, is written instead of the counts.
	Raw Raw `json:"-"`
}

// AppendJSON appends u as a JSON object.
func (u *Usage) AppendJSON(dst []byte, o Options) []byte {
	if u.Raw != nil {
		return appendRaw(dst, u.Raw, o.esc())
	}
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, u.PromptTokens, 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, u.CompletionTokens, 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, u.TotalTokens, 10)
	return append(dst, '}')
}

// ToolCall is one tool call of a whole assistant message. It keeps its json tags (every
// member written, none omitted) because the Granite stage's own structs still hold it and
// encode it with json.Marshal; its hand-written writer writes the same bytes.
type ToolCall struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is a tool call's function and its arguments. Arguments is a string, not a Raw: the
// wire carries the model's JSON text as a string, which need not even be valid JSON.
type Function struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// AppendJSON appends t as a JSON object: id, type, function{name, arguments}.
func (t *ToolCall) AppendJSON(dst []byte, o Options) []byte {
	esc := o.esc()
	dst = append(dst, `{"id":`...)
	dst = jsonwire.AppendString(dst, t.ID, esc)
	dst = append(dst, `,"type":`...)
	dst = jsonwire.AppendString(dst, t.Type, esc)
	dst = appendFunction(dst, &t.Function, esc)
	return append(dst, '}')
}

// ToolCallDelta is a tool call as a chunk's delta carries it: its index in the message's list,
// and an id and type only on the piece that opens it (empty ones are left out), the arguments
// coming in pieces.
type ToolCallDelta struct {
	Index    int
	ID, Type string
	Function Function
}

// AppendJSON appends t as a JSON object: index, id?, type?, function{name, arguments}.
func (t *ToolCallDelta) AppendJSON(dst []byte, o Options) []byte {
	esc := o.esc()
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(t.Index), 10)
	if t.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = jsonwire.AppendString(dst, t.ID, esc)
	}
	if t.Type != "" {
		dst = append(dst, `,"type":`...)
		dst = jsonwire.AppendString(dst, t.Type, esc)
	}
	dst = appendFunction(dst, &t.Function, esc)
	return append(dst, '}')
}

func appendFunction(dst []byte, f *Function, esc jsonwire.Escaping) []byte {
	dst = append(dst, `,"function":{"name":`...)
	dst = jsonwire.AppendString(dst, f.Name, esc)
	dst = append(dst, `,"arguments":`...)
	dst = jsonwire.AppendString(dst, f.Arguments, esc)
	return append(dst, '}')
}

// Message is a whole answer's assistant message. Content is a pointer because an answer that
// is tool calls and nothing else has a null content; a writer that always has text sets it.
type Message struct {
	Role             string
	Content          *string
	ReasoningContent *string // left out when nil
	ToolCalls        []ToolCall
	// Extra is members written after tool_calls as they are, each with its leading comma
	// (`,"citations":[…]`): the members some models add (Granite's citations, documents,
	// hallucinations, parse_error), which this package does not model.
	Extra []byte
}

// AppendJSON appends m as a JSON object: role, content, reasoning_content?, tool_calls?, then
// Extra.
func (m *Message) AppendJSON(dst []byte, o Options) []byte {
	esc := o.esc()
	dst = append(dst, `{"role":`...)
	dst = jsonwire.AppendString(dst, m.Role, esc)
	dst = append(dst, `,"content":`...)
	dst = appendStringOrNull(dst, m.Content, esc)
	if m.ReasoningContent != nil {
		dst = append(dst, `,"reasoning_content":`...)
		dst = jsonwire.AppendString(dst, *m.ReasoningContent, esc)
	}
	if len(m.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = m.ToolCalls[i].AppendJSON(dst, o)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, m.Extra...)
	return append(dst, '}')
}

// Delta is a chunk's piece of an assistant message: every member is left out when empty, so a
// finishing chunk's delta is {}.
type Delta struct {
	Role                      string
	Content, ReasoningContent *string
	ToolCalls                 []ToolCallDelta
	Extra                     []byte // as Message's
}

// AppendJSON appends d as a JSON object: role?, content?, reasoning_content?, tool_calls?, then
// Extra.
func (d *Delta) AppendJSON(dst []byte, o Options) []byte {
	esc := o.esc()
	dst = append(dst, '{')
	n := len(dst) // a member's comma is written when something came before it
	if d.Role != "" {
		dst = append(dst, `"role":`...)
		dst = jsonwire.AppendString(dst, d.Role, esc)
	}
	for _, m := range [...]struct {
		key string
		s   *string
	}{{`"content":`, d.Content}, {`"reasoning_content":`, d.ReasoningContent}} {
		if m.s != nil {
			dst = appendComma(dst, n)
			dst = append(dst, m.key...)
			dst = jsonwire.AppendString(dst, *m.s, esc)
		}
	}
	if len(d.ToolCalls) > 0 {
		dst = appendComma(dst, n)
		dst = append(dst, `"tool_calls":[`...)
		for i := range d.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = d.ToolCalls[i].AppendJSON(dst, o)
		}
		dst = append(dst, ']')
	}
	if len(d.Extra) > 0 && len(dst) == n {
		dst = append(dst, d.Extra[1:]...) // the first member: its comma dropped
	} else {
		dst = append(dst, d.Extra...)
	}
	return append(dst, '}')
}

// ChatChoice is one choice of a whole chat completion. Logprobs nil is written as null (the
// gateway's answers carry none); StopReason is vLLM's (the stop string or token id that ended
// the choice), left out when nil.
type ChatChoice struct {
	Index        int
	Message      Message
	Logprobs     Raw
	FinishReason *string
	StopReason   Raw
}

// AppendJSON appends c as a JSON object: index, message, logprobs, finish_reason, stop_reason?.
func (c *ChatChoice) AppendJSON(dst []byte, o Options) []byte {
	dst = appendIndex(dst, c.Index)
	dst = append(dst, `,"message":`...)
	dst = c.Message.AppendJSON(dst, o)
	return appendChoiceTail(dst, c.Logprobs, c.FinishReason, c.StopReason, o.esc())
}

// ChunkChoice is one choice of a chunk: Text for a text completion's, Delta for a chat
// completion's (each left out when nil).
type ChunkChoice struct {
	Index        int
	Text         *string
	Delta        *Delta
	Logprobs     Raw
	FinishReason *string
	StopReason   Raw
}

// AppendJSON appends c as a JSON object: index, text?, delta?, logprobs, finish_reason,
// stop_reason?.
func (c *ChunkChoice) AppendJSON(dst []byte, o Options) []byte {
	dst = appendIndex(dst, c.Index)
	if c.Text != nil {
		dst = append(dst, `,"text":`...)
		dst = jsonwire.AppendString(dst, *c.Text, o.esc())
	}
	if c.Delta != nil {
		dst = append(dst, `,"delta":`...)
		dst = c.Delta.AppendJSON(dst, o)
	}
	return appendChoiceTail(dst, c.Logprobs, c.FinishReason, c.StopReason, o.esc())
}

// CompletionChoice is one choice of a whole text completion. TokenIDs is what a token-only
// upstream sends instead of text; it is read, never written (a client asked for text).
type CompletionChoice struct {
	Index        int
	Text         string
	TokenIDs     []int
	Logprobs     Raw
	FinishReason *string
	StopReason   Raw
}

// AppendJSON appends c as a JSON object: index, text, logprobs, finish_reason, stop_reason?.
func (c *CompletionChoice) AppendJSON(dst []byte, o Options) []byte {
	dst = appendIndex(dst, c.Index)
	dst = append(dst, `,"text":`...)
	dst = jsonwire.AppendString(dst, c.Text, o.esc())
	return appendChoiceTail(dst, c.Logprobs, c.FinishReason, c.StopReason, o.esc())
}

// ChatCompletion is a whole chat completion (object "chat.completion"). The three answer objects
// share their Header and differ in their choices, so that one writer (and one place that
// decides the member order) serves them all.
type ChatCompletion struct {
	Header
	Choices []ChatChoice
}

// Chunk is one streamed event of either API (object "chat.completion.chunk" or
// "text_completion"); a usage chunk has no choices (an empty, not a nil, list).
type Chunk struct {
	Header
	Choices []ChunkChoice
}

// Completion is a whole text completion (object "text_completion"), or one event of a stream of
// them as a reader reads it (DecodeCompletion, DecodeCompletionChunk).
type Completion struct {
	Header
	Choices []CompletionChoice
	// Error is a stream event's error member as it came (an upstream failing mid-stream sends
	// {"error":{…}} as an event): read by DecodeCompletionChunk, never written.
	Error Raw
}

// Header is what the three objects share besides their choices. SystemFingerprint is Raw
// because the token-input stage passes the upstream's through whatever it is (null kept); a
// writer that has a string writes it with jsonwire.AppendString. Nil fingerprint and usage are
// left out.
type Header struct {
	ID                string
	Object            string
	Created           int64
	Model             string
	SystemFingerprint Raw
	Usage             *Usage
}

// AppendJSON appends c as a JSON object: id, object, created, model, system_fingerprint?,
// choices, usage? (the fingerprint last under FingerprintLast).
func (c *ChatCompletion) AppendJSON(dst []byte, o Options) []byte {
	return c.Header.appendTail(appendChoices(c.Header.appendHead(dst, o), c.Choices, o), o)
}

// AppendJSON appends c in ChatCompletion's layout.
func (c *Chunk) AppendJSON(dst []byte, o Options) []byte {
	return c.Header.appendTail(appendChoices(c.Header.appendHead(dst, o), c.Choices, o), o)
}

// AppendJSON appends c in ChatCompletion's layout.
func (c *Completion) AppendJSON(dst []byte, o Options) []byte {
	return c.Header.appendTail(appendChoices(c.Header.appendHead(dst, o), c.Choices, o), o)
}

// The three objects differ only in their choices: the header is written around them by two
// plain methods and the choices by a generic function, rather than one generic function over
// the whole object, because escape analysis takes what a generic function gets for escaping (a
// method called through its dictionary), which would move every answer written to the heap.

// appendHead writes the object up to its choices: id, object, created, model,
// system_fingerprint? (unless FingerprintLast).
func (h *Header) appendHead(dst []byte, o Options) []byte {
	esc := o.esc()
	dst = append(dst, `{"id":`...)
	dst = jsonwire.AppendString(dst, h.ID, esc)
	dst = append(dst, `,"object":`...)
	dst = jsonwire.AppendString(dst, h.Object, esc)
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, h.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = jsonwire.AppendString(dst, h.Model, esc)
	if !o.FingerprintLast {
		dst = h.appendFingerprint(dst, esc)
	}
	return dst
}

// appendChoices writes the choices member; a nil list is written null, as json.Marshal writes
// it.
func appendChoices[T any, P interface {
	*T
	AppendJSON([]byte, Options) []byte
}](dst []byte, choices []T, o Options) []byte {
	if choices == nil {
		return append(dst, `,"choices":null`...)
	}
	dst = append(dst, `,"choices":[`...)
	for i := range choices {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = P(&choices[i]).AppendJSON(dst, o)
	}
	return append(dst, ']')
}

// appendTail writes the object from its choices on: usage?, system_fingerprint? (under
// FingerprintLast), and the closing brace.
func (h *Header) appendTail(dst []byte, o Options) []byte {
	if h.Usage != nil {
		dst = append(dst, `,"usage":`...)
		dst = h.Usage.AppendJSON(dst, o)
	}
	if o.FingerprintLast {
		dst = h.appendFingerprint(dst, o.esc())
	}
	return append(dst, '}')
}

func (h *Header) appendFingerprint(dst []byte, esc jsonwire.Escaping) []byte {
	if len(h.SystemFingerprint) == 0 {
		return dst
	}
	dst = append(dst, `,"system_fingerprint":`...)
	return appendRaw(dst, h.SystemFingerprint, esc)
}

func appendIndex(dst []byte, i int) []byte {
	dst = append(dst, `{"index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// appendChoiceTail writes what every choice ends with: logprobs, finish_reason, stop_reason?,
// and the closing brace.
func appendChoiceTail(dst []byte, logprobs Raw, finish *string, stop Raw, esc jsonwire.Escaping) []byte {
	dst = append(dst, `,"logprobs":`...)
	dst = appendRaw(dst, logprobs, esc)
	dst = append(dst, `,"finish_reason":`...)
	dst = appendStringOrNull(dst, finish, esc)
	if len(stop) > 0 {
		dst = append(dst, `,"stop_reason":`...)
		dst = appendRaw(dst, stop, esc)
	}
	return append(dst, '}')
}

// appendRaw writes r compacted, nil or invalid JSON as null.
func appendRaw(dst []byte, r Raw, esc jsonwire.Escaping) []byte {
	if r == nil {
		return append(dst, "null"...)
	}
	out, err := jsonwire.AppendCompact(dst, r, esc)
	if err != nil {
		return append(dst, "null"...)
	}
	return out
}

func appendStringOrNull(dst []byte, s *string, esc jsonwire.Escaping) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return jsonwire.AppendString(dst, *s, esc)
}

// appendComma writes a member's comma unless it is the first of the object opened at n.
func appendComma(dst []byte, n int) []byte {
	if len(dst) > n {
		return append(dst, ',')
	}
	return dst
}
