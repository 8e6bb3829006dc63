package openaiwire

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The Responses API (POST /v1/responses) served over a chat-completions upstream: a request is
// translated into a chat completions body (ResponsesToChat), and the upstream's answer back into
// a Response object (ChatToResponse) or, streamed, into the Responses event sequence
// (ResponsesStream). The rules are those of issue 38's reference (openai_responses.md, section 6
// and the stream's section 4); the tests quote each one. Everything here is pure: ids and times
// are the caller's (ResponsesMeta), and state (a previous_response_id's conversation) comes in
// as items.
//
// Top-level request members that translation ignores, as OpenAI's newer members and vLLM do
// (unknown members are ignored too, never refused): stream_options, max_tool_calls,
// service_tier, prompt_cache_key, prompt_cache_retention, prompt_cache_options,
// context_management, moderation, text.verbosity, reasoning.summary (and generate_summary),
// include except "message.output_text.logprobs". Kept for the gateway, not sent upstream:
// store, previous_response_id, metadata, truncation ("disabled", or "auto": the caller leaves
// out the oldest turns of prev when the request does not fit), background (ResponsesMeta: the
// caller runs it in the background, or refuses it). Refused: conversation, prompt, every
// built-in tool.

// ResponsesError is a Responses request the translation refuses, with the members of OpenAI's
// error object, so that the gateway answers it as OpenAI would (400, the same type, param and
// code) and the SDKs raise their BadRequestError with err.param set. Empty Param and Code are
// null on the wire.
type ResponsesError struct {
	Message string
	Type    string // "invalid_request_error"
	Param   string // the member at fault: "tools[0].type", "input[3].call_id"
	Code    string // "unsupported_value", "unsupported_parameter", "missing_required_parameter"
	err     error  // the cause, for errors.Is and the logs
}

func (e *ResponsesError) Error() string {
	if e.Param == "" {
		return "openaiwire: responses request: " + e.Message
	}
	return "openaiwire: responses request: " + e.Param + ": " + e.Message
}

func (e *ResponsesError) Unwrap() error { return e.err }

// AppendJSON appends the error as OpenAI's error body: {"error":{message,type,param,code}}, all
// four members present (the OpenAPI Error object requires them).
func (e *ResponsesError) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonwire.AppendString(dst, e.Message, respEsc)
	dst = append(dst, `,"type":`...)
	dst = jsonwire.AppendString(dst, e.Type, respEsc)
	dst = append(dst, `,"param":`...)
	dst = appendStringOrEmptyNull(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendStringOrEmptyNull(dst, e.Code)
	return append(dst, "}}"...)
}

func appendStringOrEmptyNull(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return jsonwire.AppendString(dst, s, respEsc)
}

func invalid(param, code, format string, args ...any) *ResponsesError {
	return &ResponsesError{Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: param, Code: code}
}

// respEsc is the escaping of everything this file writes to clients: json.Marshal's, so that
// the tests can compare with it and U+2028 never breaks an old JavaScript client.
const respEsc = jsonwire.EncodingJSON

// ResponsesMeta is what a Response says besides its output: the ids and times the gateway mints,
// and the request's parameters, which a Response echoes. ResponsesToChat fills the request's
// part; the caller sets ID, CreatedAt and CompletedAt. The Raw members are the request's values
// as sent (nil: absent or null, and the Response then has OpenAI's default); they share one
// private copy, not the request body.
type ResponsesMeta struct {
	ID          string // resp_…; its suffix names the output items (msg_…, fc_…, rs_…)
	CreatedAt   int64  // unix seconds
	CompletedAt int64  // unix seconds, written only on a completed Response
	Model       string
	Stream      bool
	Store       bool // default true, as OpenAI
	// Background: the request asks to run in the background (the caller answers at once with
	// EmptyResponse and polls are answered from its store); a Response says so.
	Background bool
	// PreviousResponseID is the conversation this request continues: the caller loads its items
	// and hands them to ResponsesToChat (which cannot, being pure, and so only reads the id).
	PreviousResponseID string

	Instructions, Tools, ToolChoice, Text, Reasoning, Temperature, TopP,
	MaxOutputTokens, ParallelToolCalls, Metadata, User, Truncation Raw
}

// ResponsesToChat translates a Responses request into a chat completions request body. prev is
// the stored conversation the request continues (previous_response_id), each element one item
// as an input array or a Response's output holds it, oldest first; nil when none. Its items come
// before the request's input, and the function_call_output items of the input may answer its
// calls. The error is a *ResponsesError for anything the client must fix; the chat body has the
// members in one fixed order: model, messages, then the parameters.
func ResponsesToChat(body []byte, prev []Raw) (chat []byte, meta ResponsesMeta, err error) {
	var t translator
	t.msgs = make([]byte, 0, len(body)+64)
	if err := t.prevItems(prev); err != nil {
		return nil, ResponsesMeta{}, err
	}
	if err := t.readTop(body); err != nil {
		return nil, ResponsesMeta{}, err
	}
	chat = make([]byte, 0, len(t.msgs)+len(body)/2+64)
	chat, err = t.writeChat(chat)
	if err != nil {
		return nil, ResponsesMeta{}, err
	}
	return chat, t.meta(), nil
}

// Request members the translation reads, by their index in topNames.
const (
	topModel = iota
	topInput
	topInstructions
	topTools
	topToolChoice
	topText
	topMaxOutputTokens
	topTemperature
	topTopP
	topStream
	topParallelToolCalls
	topReasoning
	topUser
	topSafetyIdentifier
	topMetadata
	topStore
	topPreviousResponseID
	topConversation
	topPrompt
	topBackground
	topTruncation
	topInclude
	topTopLogprobs
	topCount
)

var topNames = [topCount]string{"model", "input", "instructions", "tools", "tool_choice", "text",
	"max_output_tokens", "temperature", "top_p", "stream", "parallel_tool_calls", "reasoning", "user",
	"safety_identifier", "metadata", "store", "previous_response_id", "conversation", "prompt",
	"background", "truncation", "include", "top_logprobs"}

// translator holds one request while it is translated: the body, its members' values, and
// what the items walk needs to remember.
type translator struct {
	body []byte
	top  [topCount]jsonwire.Token // Kind Invalid: absent
	// callIDs are the call_ids of the function_call items seen so far, for the outputs that
	// answer them; views of the source bytes where no unescaping was needed.
	callIDs []string
	scratch []byte
	// allowed is tool_choice allowed_tools' list of function names (nil: every tool).
	allowed []string
	asst    pendingAssistant
	// reasoning is the text of a reasoning item, for the assistant message that follows it.
	reasoning []strTok
	out       []strTok // a message's or a tool output's texts
	partBuf   []part
	// msgs are the chat messages of the stored conversation (up to prevLen, whose calls are
	// callIDs[:prevCalls]) and of the input, comma-separated.
	msgs               []byte
	prevLen, prevCalls int
	itemErr            error // the first input item refused
}

// strTok is a JSON string in its source: written by copying when it needs no decoding.
type strTok struct {
	src []byte
	t   jsonwire.Token
}

// pendingAssistant is the assistant message being assembled from consecutive items (an
// assistant message and the function calls after it are one chat message, since chat templates
// and some upstreams refuse back-to-back assistant messages).
type pendingAssistant struct {
	open      bool
	content   []strTok
	reasoning []strTok
	calls     []toolCallToks
}

type toolCallToks struct{ id, name, args strTok }

func memberIs(src []byte, key jsonwire.Token, name string) bool {
	return key.Plain() && string(key.Contents(src)) == name
}

// keyName is a member's name: its bytes when plain, else unescaped (escaped names are rare and
// cost an allocation).
func keyName(src []byte, key jsonwire.Token) string {
	c := key.Contents(src)
	if key.Plain() {
		return unsafe.String(unsafe.SliceData(c), len(c))
	}
	s, _ := jsonwire.UnescapeString(c, jsonwire.ReplaceInvalid)
	return s
}

// readTop finds the request's members; the last of a repeated name wins, as in encoding/json.
func (t *translator) readTop(body []byte) error {
	t.body = body
	s := jsonwire.NewScanner(body, jsonwire.Options{})
	if s.Peek() != '{' {
		if err := s.Err(); err != nil {
			return t.syntax(err)
		}
		return invalid("", "", "The request body must be a JSON object.")
	}
	if err := s.EnterObject(); err != nil {
		return t.syntax(err)
	}
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return t.syntax(err)
		}
		if !more {
			break
		}
		name := keyName(body, key)
		if name == "input" && s.Peek() == '[' {
			// The items are translated as the scan passes them: the body is read once.
			v, err := t.walkInput(&s)
			if err != nil {
				return t.syntax(err)
			}
			t.top[topInput] = v
			continue
		}
		v, err := s.ReadValue()
		if err != nil {
			return t.syntax(err)
		}
		if name == "input" {
			t.resetInput() // a string or null input replaces an array before it
		}
		for i := range topNames {
			if name == topNames[i] {
				t.top[i] = v
				if v.Kind == jsonwire.Null {
					t.top[i] = jsonwire.Token{}
				}
				break
			}
		}
	}
	if err := s.Finish(); err != nil {
		return t.syntax(err)
	}
	if err := t.checkTop(); err != nil {
		return err
	}
	return t.itemErr
}

// walkInput translates the input array the scanner is at into t.msgs, after the stored
// conversation's messages, and returns the array's token. A syntax error is returned; an
// item's error is kept in t.itemErr (the first), and the scan goes on, so that a body that is
// not JSON is refused as such. A repeated input member replaces the earlier one.
func (t *translator) walkInput(s *jsonwire.Scanner) (jsonwire.Token, error) {
	start := s.Offset()
	t.resetInput()
	if err := s.EnterArray(); err != nil {
		return jsonwire.Token{}, err
	}
	for i := 0; ; i++ {
		more, err := s.NextElement()
		if err != nil {
			return jsonwire.Token{}, err
		}
		if !more {
			break
		}
		if t.itemErr != nil || s.Peek() != '{' {
			if _, err := s.ReadValue(); err != nil {
				return jsonwire.Token{}, err
			}
			if t.itemErr == nil {
				t.itemErr = wrongType(where{i: i}.String(), "an object")
			}
			continue
		}
		if err := s.EnterObject(); err != nil {
			return jsonwire.Token{}, err
		}
		var m [itCount]jsonwire.Token
		if err := collectIn(s, 0, itemNames, m[:]); err != nil {
			return jsonwire.Token{}, err
		}
		if out, err := t.item(t.msgs, 0, t.body, &m, where{i: i}); err != nil {
			t.itemErr = err
		} else {
			t.msgs = out
		}
	}
	return jsonwire.Token{Start: start, End: s.Offset(), Kind: jsonwire.Array}, nil
}

// resetInput drops what an earlier input member made: the last of repeated members wins.
func (t *translator) resetInput() {
	t.msgs, t.callIDs, t.itemErr = t.msgs[:t.prevLen], t.callIDs[:t.prevCalls], nil
	t.asst.open, t.reasoning = false, t.reasoning[:0]
}

// prevItems translates the stored conversation into t.msgs.
func (t *translator) prevItems(prev []Raw) error {
	for i, item := range prev {
		// Stored items are the gateway's own, but a store is outside this package: checked, and
		// named by the id that brought them.
		if err := jsonwire.Validate(item, jsonwire.Options{}); err != nil {
			e := invalid("previous_response_id", "", "A stored item (%d) of the previous response is not valid JSON.", i)
			e.err = err
			return e
		}
		start := len(item) - len(trimLeft(item))
		v := jsonwire.Token{Start: start, End: len(item), Kind: jsonwire.KindOf(firstByte(item))}
		if v.Kind != jsonwire.Object {
			return wrongType("previous_response_id", "an object")
		}
		var m [itCount]jsonwire.Token
		collect(item, v, itemNames, m[:])
		out, err := t.item(t.msgs, 0, item, &m, where{i: -1})
		if err != nil {
			return err
		}
		t.msgs = out
	}
	t.msgs = t.flush(t.msgs, 0)
	t.prevLen, t.prevCalls = len(t.msgs), len(t.callIDs)
	return nil
}

func (t *translator) syntax(err error) error {
	e := invalid("", "", "We could not parse the JSON body of your request: %v", err)
	e.err = err
	return e
}

// checkTop refuses what cannot be translated and checks the scalar members' types.
func (t *translator) checkTop() error {
	for _, i := range [...]int{topConversation, topPrompt} {
		if t.top[i].Kind != jsonwire.Invalid {
			return invalid(topNames[i], "unsupported_parameter", "Unsupported parameter: '%s'.", topNames[i])
		}
	}
	if tr := t.top[topTruncation]; tr.Kind != jsonwire.Invalid && tr.Kind != jsonwire.Null &&
		string(tr.Raw(t.body)) != `"disabled"` && string(tr.Raw(t.body)) != `"auto"` {
		return invalid("truncation", "unsupported_value", "Unsupported value: 'truncation' must be 'auto' or 'disabled'.")
	}
	if t.top[topModel].Kind != jsonwire.String {
		if t.top[topModel].Kind == jsonwire.Invalid {
			return invalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
		}
		return wrongType("model", "a string")
	}
	for _, c := range [...]struct {
		i    int
		kind string
		ok   func(jsonwire.Token) bool
	}{
		{topTemperature, "a number", isNumber}, {topTopP, "a number", isNumber},
		{topMaxOutputTokens, "an integer", isInteger}, {topTopLogprobs, "an integer", isInteger},
		{topStream, "a boolean", isBool}, {topParallelToolCalls, "a boolean", isBool},
		{topStore, "a boolean", isBool}, {topBackground, "a boolean", isBool},
		{topUser, "a string", isString}, {topSafetyIdentifier, "a string", isString},
		{topPreviousResponseID, "a string", isString}, {topInstructions, "a string", isString},
		{topTruncation, "a string", isString}, {topInput, "a string or an array", isStringOrArray},
		{topTools, "an array", isArray}, {topInclude, "an array", isArray},
		{topMetadata, "an object", isObject}, {topText, "an object", isObject},
		{topReasoning, "an object", isObject},
	} {
		if v := t.top[c.i]; v.Kind != jsonwire.Invalid && !c.ok(v) {
			return wrongType(topNames[c.i], c.kind)
		}
	}
	return nil
}

func wrongType(param, want string) *ResponsesError {
	return invalid(param, "", "Invalid type for '%s': expected %s.", param, want)
}

func isNumber(v jsonwire.Token) bool        { return v.Kind == jsonwire.Number }
func isInteger(v jsonwire.Token) bool       { return v.Integer() }
func isBool(v jsonwire.Token) bool          { return v.Kind == jsonwire.True || v.Kind == jsonwire.False }
func isString(v jsonwire.Token) bool        { return v.Kind == jsonwire.String }
func isArray(v jsonwire.Token) bool         { return v.Kind == jsonwire.Array }
func isObject(v jsonwire.Token) bool        { return v.Kind == jsonwire.Object }
func isStringOrArray(v jsonwire.Token) bool { return isString(v) || isArray(v) }

// meta is the request's part of ResponsesMeta, the echoed values copied into one buffer.
func (t *translator) meta() ResponsesMeta {
	m := ResponsesMeta{Store: t.top[topStore].Kind != jsonwire.False, Stream: t.top[topStream].Kind == jsonwire.True,
		Background: t.top[topBackground].Kind == jsonwire.True}
	m.Model, _ = jsonwire.UnescapeString(t.top[topModel].Contents(t.body), jsonwire.ReplaceInvalid)
	if v := t.top[topPreviousResponseID]; v.Kind == jsonwire.String {
		m.PreviousResponseID, _ = jsonwire.UnescapeString(v.Contents(t.body), jsonwire.ReplaceInvalid)
	}
	echo := [...]struct {
		i   int
		dst *Raw
	}{
		{topInstructions, &m.Instructions}, {topTools, &m.Tools}, {topToolChoice, &m.ToolChoice},
		{topText, &m.Text}, {topReasoning, &m.Reasoning}, {topTemperature, &m.Temperature},
		{topTopP, &m.TopP}, {topMaxOutputTokens, &m.MaxOutputTokens},
		{topParallelToolCalls, &m.ParallelToolCalls}, {topMetadata, &m.Metadata}, {topUser, &m.User},
		{topTruncation, &m.Truncation},
	}
	n := 0
	for _, e := range echo {
		n += t.top[e.i].End - t.top[e.i].Start
	}
	buf := make([]byte, 0, n)
	for _, e := range echo {
		if v := t.top[e.i]; v.Kind != jsonwire.Invalid {
			start := len(buf)
			buf = append(buf, v.Raw(t.body)...)
			*e.dst = Raw(buf[start:len(buf):len(buf)])
		}
	}
	return m
}

// writeChat writes the chat body: model, messages (instructions first, then t.msgs, the
// conversation's and the input's), then the parameters that map.
func (t *translator) writeChat(dst []byte) ([]byte, error) {
	dst = append(dst, `{"model":`...)
	dst = append(dst, t.top[topModel].Raw(t.body)...)
	dst = append(dst, `,"messages":[`...)
	n := len(dst)
	if v := t.top[topInstructions]; v.Kind == jsonwire.String && v.End-v.Start > 2 {
		// instructions are this call's only: never inherited from prev (the caller does not
		// store them as items).
		dst = append(dst, `{"role":"system","content":`...)
		dst = appendStr(dst, strTok{t.body, v}, &t.scratch)
		dst = append(dst, '}')
	}
	if v := t.top[topInput]; v.Kind == jsonwire.String {
		t.msgs = appendComma(t.msgs, 0)
		t.msgs = append(t.msgs, `{"role":"user","content":`...)
		t.msgs = appendStr(t.msgs, strTok{t.body, v}, &t.scratch)
		t.msgs = append(t.msgs, '}')
	}
	t.msgs = t.flush(t.msgs, 0)
	if len(t.msgs) > 0 {
		dst = appendComma(dst, n)
		dst = append(dst, t.msgs...)
	}
	if len(dst) == n {
		return nil, invalid("input", "missing_required_parameter", "Missing required parameter: 'input' (there are no messages to send).")
	}
	dst = append(dst, ']')
	return t.writeParams(dst)
}

// where names an input item in errors, "input[3]", or (i < 0) an item of the stored
// conversation; the name is built only for an error.
type where struct{ i int }

func (w where) String() string {
	if w.i < 0 {
		return "previous_response_id"
	}
	return "input[" + strconv.Itoa(w.i) + "]"
}

// at is the param of member sub of the item at w, or of its part j (j >= 0).
func (w where) at(sub string, j int, member string) string {
	p := w.String() + sub
	if j >= 0 {
		p += "[" + strconv.Itoa(j) + "]"
	}
	if member != "" {
		p += "." + member
	}
	return p
}

func firstByte(b []byte) byte {
	if b = trimLeft(b); len(b) > 0 {
		return b[0]
	}
	return 0
}

func trimLeft(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// collect finds, in one pass over the object v of src (checked already), the members named in
// names: out[i] is names[i]'s value, Kind Invalid when absent or null; the last of a repeated
// name wins, as in encoding/json.
func collect(src []byte, v jsonwire.Token, names []string, out []jsonwire.Token) {
	s := jsonwire.NewScanner(v.Raw(src), jsonwire.Options{})
	_ = s.EnterObject()
	_ = collectIn(&s, v.Start, names, out) // checked already
}

// collectIn is collect on the object s has just entered, s reading its source from offset
// base on: walking the object in place, rather than reading it as a value first, scans each
// byte once.
func collectIn(s *jsonwire.Scanner, base int, names []string, out []jsonwire.Token) error {
	in := s.Input()
	for {
		key, more, err := s.NextMember()
		if err != nil || !more {
			return err
		}
		val, err := s.ReadValue()
		if err != nil {
			return err
		}
		name := keyName(in, key)
		for i := range names {
			if name == names[i] {
				out[i] = jsonwire.Token{}
				if val.Kind != jsonwire.Null {
					val.Start += base
					val.End += base
					out[i] = val
				}
				break
			}
		}
	}
}

// Item members, by their index in itemNames.
const (
	itType = iota
	itRole
	itContent
	itCallID
	itName
	itArguments
	itOutput
	itSummary
	itCount
)

var itemNames = []string{"type", "role", "content", "call_id", "name", "arguments", "output", "summary"}

// item translates one input item, its members m found in src, into messages after those from
// n on.
func (t *translator) item(dst []byte, n int, src []byte, m *[itCount]jsonwire.Token, w where) ([]byte, error) {
	typ := "message"
	if m[itType].Kind != jsonwire.Invalid {
		if m[itType].Kind != jsonwire.String {
			return nil, wrongType(w.at(".type", -1, ""), "a string")
		}
		typ = keyName(src, m[itType])
	} else if m[itRole].Kind == jsonwire.Invalid {
		return nil, invalid(w.at(".type", -1, ""), "missing_required_parameter", "Missing required parameter: '%s'.", w.at(".type", -1, ""))
	}
	switch typ {
	case "message":
		return t.message(dst, n, src, m, w)
	case "function_call":
		return t.functionCall(dst, src, m, w)
	case "function_call_output":
		return t.functionCallOutput(dst, n, src, m, w)
	case "reasoning":
		dst = t.flush(dst, n)
		t.reasoning = t.reasoning[:0]
		// The reasoning's text (content, else its summary) goes with the next assistant message;
		// encrypted_content is never forwarded: only its minter can read it.
		if err := t.texts(src, m[itContent], &t.reasoning, w, ".content"); err != nil {
			return nil, err
		}
		if len(t.reasoning) == 0 {
			if err := t.texts(src, m[itSummary], &t.reasoning, w, ".summary"); err != nil {
				return nil, err
			}
		}
		return dst, nil
	}
	return nil, invalid(w.at(".type", -1, ""), "unsupported_value", "Input item type '%s' is not supported by this gateway.", typ)
}

// Content part members, by their index in partNames.
const (
	ptType = iota
	ptText
	ptImageURL
	ptDetail
	ptRefusal
	partCount
)

var partNames = []string{"type", "text", "image_url", "detail", "refusal"}

// part is one content part: its type and members.
type part struct {
	typ string
	m   [partCount]jsonwire.Token
}

// parts reads the parts array v (member sub of the item at w) into t.partBuf.
func (t *translator) parts(src []byte, v jsonwire.Token, w where, sub string) ([]part, error) {
	t.partBuf = t.partBuf[:0]
	s := jsonwire.NewScanner(src[v.Start:v.End], jsonwire.Options{})
	_ = s.EnterArray()
	for j := 0; ; j++ {
		if more, _ := s.NextElement(); !more {
			return t.partBuf, nil
		}
		if s.Peek() != '{' {
			return nil, wrongType(w.at(sub, j, ""), "an object")
		}
		_ = s.EnterObject()
		t.partBuf = append(t.partBuf, part{})
		p := &t.partBuf[len(t.partBuf)-1]
		_ = collectIn(&s, v.Start, partNames, p.m[:]) // checked already
		if p.m[ptType].Kind != jsonwire.String {
			return nil, invalid(w.at(sub, j, "type"), "missing_required_parameter", "Missing or invalid content part type.")
		}
		p.typ = keyName(src, p.m[ptType])
	}
}

// texts appends the text of v (member sub of the item at w): a string, or the text parts of an
// array (what clients echo: input_text, output_text, reasoning_text, summary_text, refusal),
// refusing other parts.
func (t *translator) texts(src []byte, v jsonwire.Token, out *[]strTok, w where, sub string) error {
	switch v.Kind {
	case jsonwire.Invalid:
		return nil
	case jsonwire.String:
		*out = append(*out, strTok{src, v})
		return nil
	case jsonwire.Array:
	default:
		return wrongType(w.at(sub, -1, ""), "a string or an array")
	}
	ps, err := t.parts(src, v, w, sub)
	if err != nil {
		return err
	}
	for j := range ps {
		f := ps[j].m[ptText]
		switch ps[j].typ {
		case "input_text", "output_text", "reasoning_text", "summary_text", "text":
		case "refusal":
			f = ps[j].m[ptRefusal]
		default:
			return invalid(w.at(sub, j, "type"), "unsupported_value", "Content part type '%s' is not supported here.", ps[j].typ)
		}
		if f.Kind != jsonwire.String {
			return wrongType(w.at(sub, j, "text"), "a string")
		}
		*out = append(*out, strTok{src, f})
	}
	return nil
}

// message translates a message item.
func (t *translator) message(dst []byte, n int, src []byte, m *[itCount]jsonwire.Token, w where) ([]byte, error) {
	if m[itRole].Kind != jsonwire.String {
		return nil, invalid(w.at(".role", -1, ""), "missing_required_parameter", "Missing required parameter: '%s'.", w.at(".role", -1, ""))
	}
	role := keyName(src, m[itRole])
	content := m[itContent]
	if content.Kind != jsonwire.String && content.Kind != jsonwire.Array {
		return nil, invalid(w.at(".content", -1, ""), "missing_required_parameter", "Missing or invalid '%s': expected a string or an array.", w.at(".content", -1, ""))
	}
	switch role {
	case "assistant":
		// An assistant message starts a chat assistant message, which the function calls right
		// after it join; a second text message starts another.
		if t.asst.open && (len(t.asst.content) > 0 || len(t.asst.calls) > 0) {
			dst = t.flush(dst, n)
		}
		if !t.asst.open {
			t.openAssistant()
		}
		return dst, t.texts(src, content, &t.asst.content, w, ".content")
	case "system", "developer":
		// developer is written system: many chat templates have no developer role. Its text
		// parts are joined, as vLLM joins them.
		dst = t.flush(dst, n)
		t.reasoning = t.reasoning[:0] // reasoning goes only with the assistant turn it preceded
		t.out = t.out[:0]
		if err := t.texts(src, content, &t.out, w, ".content"); err != nil {
			return nil, err
		}
		dst = appendComma(dst, n)
		dst = append(dst, `{"role":"system","content":`...)
		dst = appendJoined(dst, t.out, &t.scratch)
		return append(dst, '}'), nil
	case "user":
		dst = t.flush(dst, n)
		t.reasoning = t.reasoning[:0]
		if content.Kind == jsonwire.String {
			dst = appendComma(dst, n)
			dst = append(dst, `{"role":"user","content":`...)
			dst = appendStr(dst, strTok{src, content}, &t.scratch)
			return append(dst, '}'), nil
		}
		ps, err := t.parts(src, content, w, ".content")
		if err != nil {
			return nil, err
		}
		return t.userParts(dst, n, src, ps, w)
	}
	return nil, invalid(w.at(".role", -1, ""), "unsupported_value", "Unsupported role '%s': expected user, assistant, system or developer.", role)
}

// userParts writes a user message of parts: text and images (as https or data URLs) map, files
// and audio are refused.
func (t *translator) userParts(dst []byte, n int, src []byte, ps []part, w where) ([]byte, error) {
	for j := range ps {
		p := &ps[j]
		switch p.typ {
		case "input_text", "text", "output_text":
			if p.m[ptText].Kind != jsonwire.String {
				return nil, wrongType(w.at(".content", j, "text"), "a string")
			}
		case "input_image":
			if p.m[ptImageURL].Kind != jsonwire.String {
				// file_id needs a Files API, which the gateway has not.
				return nil, invalid(w.at(".content", j, "image_url"), "unsupported_value", "Only input_image parts with an image_url (https or data URL) are supported by this gateway.")
			}
		default:
			return nil, invalid(w.at(".content", j, "type"), "unsupported_value", "Content part type '%s' is not supported by this gateway.", p.typ)
		}
	}
	dst = appendComma(dst, n)
	dst = append(dst, `{"role":"user","content":[`...)
	for j := range ps {
		p := &ps[j]
		if j > 0 {
			dst = append(dst, ',')
		}
		if p.typ != "input_image" {
			dst = append(dst, `{"type":"text","text":`...)
			dst = appendStr(dst, strTok{src, p.m[ptText]}, &t.scratch)
			dst = append(dst, '}')
			continue
		}
		dst = append(dst, `{"type":"image_url","image_url":{"url":`...)
		dst = appendStr(dst, strTok{src, p.m[ptImageURL]}, &t.scratch)
		if p.m[ptDetail].Kind == jsonwire.String {
			dst = append(dst, `,"detail":`...)
			dst = appendStr(dst, strTok{src, p.m[ptDetail]}, &t.scratch)
		}
		dst = append(dst, "}}"...)
	}
	return append(dst, "]}"...), nil
}

func (t *translator) openAssistant() {
	t.asst = pendingAssistant{open: true, content: t.asst.content[:0], calls: t.asst.calls[:0], reasoning: append(t.asst.reasoning[:0], t.reasoning...)}
	t.reasoning = t.reasoning[:0]
}

// functionCall adds a model's earlier call to the assistant message being assembled.
func (t *translator) functionCall(dst []byte, src []byte, m *[itCount]jsonwire.Token, w where) ([]byte, error) {
	for _, f := range [...]int{itCallID, itName, itArguments} {
		if m[f].Kind != jsonwire.String {
			p := w.at("."+itemNames[f], -1, "")
			return nil, invalid(p, "missing_required_parameter", "Missing or invalid '%s': expected a string.", p)
		}
	}
	if !t.asst.open {
		t.openAssistant()
	}
	t.asst.calls = append(t.asst.calls, toolCallToks{strTok{src, m[itCallID]}, strTok{src, m[itName]}, strTok{src, m[itArguments]}})
	t.callIDs = append(t.callIDs, keyName(src, m[itCallID]))
	return dst, nil
}

// functionCallOutput writes a tool message; its call must have come before (in prev or input).
func (t *translator) functionCallOutput(dst []byte, n int, src []byte, m *[itCount]jsonwire.Token, w where) ([]byte, error) {
	if m[itCallID].Kind != jsonwire.String {
		p := w.at(".call_id", -1, "")
		return nil, invalid(p, "missing_required_parameter", "Missing or invalid '%s': expected a string.", p)
	}
	id := keyName(src, m[itCallID])
	if !contains(t.callIDs, id) {
		return nil, invalid(w.at(".call_id", -1, ""), "", "No tool call found for function call output with call_id %s.", id)
	}
	t.out = t.out[:0]
	switch m[itOutput].Kind {
	case jsonwire.String:
		t.out = append(t.out, strTok{src, m[itOutput]})
	case jsonwire.Array:
		// A list output is its text parts joined; images cannot go in a chat tool message.
		if err := t.texts(src, m[itOutput], &t.out, w, ".output"); err != nil {
			return nil, err
		}
	default:
		p := w.at(".output", -1, "")
		return nil, invalid(p, "missing_required_parameter", "Missing or invalid '%s': expected a string or an array.", p)
	}
	dst = t.flush(dst, n)
	t.reasoning = t.reasoning[:0]
	dst = appendComma(dst, n)
	dst = append(dst, `{"role":"tool","tool_call_id":`...)
	dst = appendStr(dst, strTok{src, m[itCallID]}, &t.scratch)
	dst = append(dst, `,"content":`...)
	dst = appendJoined(dst, t.out, &t.scratch)
	return append(dst, '}'), nil
}

// flush writes the assistant message being assembled, if any.
func (t *translator) flush(dst []byte, n int) []byte {
	a := &t.asst
	if !a.open {
		return dst
	}
	a.open = false
	dst = appendComma(dst, n)
	dst = append(dst, `{"role":"assistant","content":`...)
	if len(a.content) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = appendJoined(dst, a.content, &t.scratch)
	}
	if len(a.reasoning) > 0 {
		// reasoning is vLLM's input name since 0.16 (reasoning_content before).
		dst = append(dst, `,"reasoning":`...)
		dst = appendJoined(dst, a.reasoning, &t.scratch)
	}
	if len(a.calls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i, c := range a.calls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendStr(dst, c.id, &t.scratch)
			dst = append(dst, `,"type":"function","function":{"name":`...)
			dst = appendStr(dst, c.name, &t.scratch)
			dst = append(dst, `,"arguments":`...)
			dst = appendStr(dst, c.args, &t.scratch)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendStr writes a string token: its source bytes, escapes and all, which the scanner
// checked are a valid JSON spelling of its value; decoded and written again only when they hold
// invalid UTF-8, which a JSON text may not (upstreams refuse it).
func appendStr(dst []byte, s strTok, scratch *[]byte) []byte {
	dst = append(dst, '"')
	dst = appendStrContents(dst, s, scratch)
	return append(dst, '"')
}

func appendStrContents(dst []byte, s strTok, scratch *[]byte) []byte {
	c := s.t.Contents(s.src)
	if s.t.Flags&jsonwire.NonASCII == 0 || utf8.Valid(c) {
		return append(dst, c...)
	}
	// The scanner checked the string, so decoding cannot fail.
	*scratch, _ = jsonwire.Unescape((*scratch)[:0], c, jsonwire.ReplaceInvalid)
	return jsonwire.AppendContents(dst, *scratch, jsonwire.Minimal)
}

// appendJoined writes texts as one string, joined by a newline as vLLM joins text parts.
func appendJoined(dst []byte, texts []strTok, scratch *[]byte) []byte {
	dst = append(dst, '"')
	for i, s := range texts {
		if i > 0 {
			dst = append(dst, `\n`...)
		}
		dst = appendStrContents(dst, s, scratch)
	}
	return append(dst, '"')
}

// writeParams writes the members after messages and closes the body.
func (t *translator) writeParams(dst []byte) ([]byte, error) {
	b := t.body
	// tool_choice first: allowed_tools filters the tools.
	var choice []byte
	if v := t.top[topToolChoice]; v.Kind != jsonwire.Invalid {
		var err error
		if choice, err = t.toolChoice(v); err != nil {
			return nil, err
		}
	}
	if v := t.top[topTools]; v.Kind == jsonwire.Array {
		var err error
		if dst, err = t.tools(dst, v); err != nil {
			return nil, err
		}
	}
	if choice != nil {
		dst = append(dst, `,"tool_choice":`...)
		dst = append(dst, choice...)
	}
	if v := t.top[topText]; v.Kind == jsonwire.Object {
		var err error
		if dst, err = t.textFormat(dst, v); err != nil {
			return nil, err
		}
	}
	for _, p := range [...]struct {
		i    int
		name string
	}{
		{topMaxOutputTokens, `,"max_tokens":`}, {topTemperature, `,"temperature":`}, {topTopP, `,"top_p":`},
		{topParallelToolCalls, `,"parallel_tool_calls":`},
	} {
		if v := t.top[p.i]; v.Kind != jsonwire.Invalid {
			dst = append(dst, p.name...)
			dst = append(dst, v.Raw(b)...)
		}
	}
	if v := t.top[topReasoning]; v.Kind == jsonwire.Object {
		if e := findMember(b, v, "effort"); e.Kind == jsonwire.String {
			dst = append(dst, `,"reasoning_effort":`...)
			dst = appendStr(dst, strTok{b, e}, &t.scratch)
		} else if e.Kind != jsonwire.Invalid && e.Kind != jsonwire.Null {
			return nil, wrongType("reasoning.effort", "a string")
		}
	}
	if v := t.top[topUser]; v.Kind == jsonwire.String {
		dst = append(dst, `,"user":`...)
		dst = appendStr(dst, strTok{b, v}, &t.scratch)
	} else if v := t.top[topSafetyIdentifier]; v.Kind == jsonwire.String {
		dst = append(dst, `,"user":`...)
		dst = appendStr(dst, strTok{b, v}, &t.scratch)
	}
	if t.includesLogprobs() {
		dst = append(dst, `,"logprobs":true`...)
		if v := t.top[topTopLogprobs]; v.Kind != jsonwire.Invalid {
			dst = append(dst, `,"top_logprobs":`...)
			dst = append(dst, v.Raw(b)...)
		}
	}
	if t.top[topStream].Kind == jsonwire.True {
		// Usage comes only in a last, choices-empty chunk, and only when asked for.
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(dst, '}'), nil
}

func (t *translator) includesLogprobs() bool {
	v := t.top[topInclude]
	if v.Kind != jsonwire.Array {
		return false
	}
	s := jsonwire.NewScanner(v.Raw(t.body), jsonwire.Options{})
	_ = s.EnterArray()
	for {
		more, _ := s.NextElement()
		if !more {
			return false
		}
		e, _ := s.ReadValue()
		if string(e.Raw(v.Raw(t.body))) == `"message.output_text.logprobs"` {
			return true
		}
	}
}

// typeOf is the type member of the object v (param, which must be kind), as a string.
func typeOf(src []byte, v jsonwire.Token, param, kind string) (string, error) {
	if v.Kind != jsonwire.Object {
		return "", wrongType(param, kind)
	}
	typ := findMember(src, v, "type")
	if typ.Kind != jsonwire.String {
		return "", invalid(param+".type", "missing_required_parameter", "Missing required parameter: '%s.type'.", param)
	}
	return keyName(src, typ), nil
}

// findMember is the value of the member name of the object v in src (Kind Invalid when absent
// or null).
func findMember(src []byte, v jsonwire.Token, name string) jsonwire.Token {
	var out [1]jsonwire.Token
	collect(src, v, []string{name}, out[:])
	return out[0]
}

// Tool members, by their index in toolNames.
const (
	tlType = iota
	tlName
	tlDescription
	tlParameters
	tlStrict
	toolCount
)

var toolNames = []string{"type", "name", "description", "parameters", "strict"}

// tools writes the function tools nested as chat has them, refusing every other kind: a
// built-in tool silently dropped would let the model answer without a tool its caller believes
// it has.
func (t *translator) tools(dst []byte, v jsonwire.Token) ([]byte, error) {
	b := t.body
	s := jsonwire.NewScanner(v.Raw(b), jsonwire.Options{})
	_ = s.EnterArray()
	start := len(dst)
	dst = append(dst, `,"tools":[`...)
	k := len(dst)
	for i := 0; ; i++ {
		if more, _ := s.NextElement(); !more {
			break
		}
		p := func(f string) string { return "tools[" + strconv.Itoa(i) + "]." + f }
		if s.Peek() != '{' {
			return nil, wrongType("tools["+strconv.Itoa(i)+"]", "an object")
		}
		_ = s.EnterObject()
		var m [toolCount]jsonwire.Token
		_ = collectIn(&s, v.Start, toolNames, m[:]) // checked already
		if m[tlType].Kind != jsonwire.String {
			return nil, invalid(p("type"), "missing_required_parameter", "Missing required parameter: '%s'.", p("type"))
		}
		if tn := keyName(b, m[tlType]); tn != "function" {
			return nil, invalid(p("type"), "unsupported_value", "Tool type '%s' is not supported by this gateway.", tn)
		}
		if m[tlName].Kind != jsonwire.String {
			return nil, invalid(p("name"), "missing_required_parameter", "Missing required parameter: '%s'.", p("name"))
		}
		if pv := m[tlParameters]; pv.Kind != jsonwire.Object && pv.Kind != jsonwire.Invalid {
			return nil, wrongType(p("parameters"), "an object")
		}
		if t.allowed != nil && !contains(t.allowed, keyName(b, m[tlName])) {
			continue
		}
		dst = appendComma(dst, k)
		dst = append(dst, `{"type":"function","function":{"name":`...)
		dst = appendStr(dst, strTok{b, m[tlName]}, &t.scratch)
		if d := m[tlDescription]; d.Kind == jsonwire.String {
			dst = append(dst, `,"description":`...)
			dst = appendStr(dst, strTok{b, d}, &t.scratch)
		}
		dst = append(dst, `,"parameters":`...)
		if pv := m[tlParameters]; pv.Kind == jsonwire.Object {
			dst = append(dst, pv.Raw(b)...)
		} else {
			// chat requires parameters; an empty object schema is a function of no arguments.
			dst = append(dst, `{"type":"object","properties":{}}`...)
		}
		if st := m[tlStrict]; isBool(st) {
			dst = append(dst, `,"strict":`...)
			dst = append(dst, st.Raw(b)...)
		}
		dst = append(dst, "}}"...)
	}
	if len(dst) == k {
		return dst[:start], nil // every tool filtered out: no tools member
	}
	return append(dst, ']'), nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// toolChoice is the chat tool_choice for v, and records allowed_tools' list.
func (t *translator) toolChoice(v jsonwire.Token) ([]byte, error) {
	b := t.body
	if v.Kind == jsonwire.String {
		switch s := keyName(b, v); s {
		case "auto", "none", "required":
			return v.Raw(b), nil
		default:
			return nil, invalid("tool_choice", "unsupported_value", "Unsupported value for 'tool_choice': '%s'.", s)
		}
	}
	tn, err := typeOf(b, v, "tool_choice", "a string or an object")
	if err != nil {
		return nil, err
	}
	switch tn {
	case "function":
		name := findMember(b, v, "name")
		if name.Kind != jsonwire.String {
			return nil, invalid("tool_choice.name", "missing_required_parameter", "Missing required parameter: 'tool_choice.name'.")
		}
		out := append([]byte(`{"type":"function","function":{"name":`), name.Raw(b)...)
		return append(out, "}}"...), nil
	case "allowed_tools":
		mode := findMember(b, v, "mode")
		if mode.Kind != jsonwire.String || (keyName(b, mode) != "auto" && keyName(b, mode) != "required") {
			return nil, invalid("tool_choice.mode", "unsupported_value", "'tool_choice.mode' must be 'auto' or 'required'.")
		}
		list := findMember(b, v, "tools")
		if list.Kind != jsonwire.Array {
			return nil, invalid("tool_choice.tools", "missing_required_parameter", "Missing required parameter: 'tool_choice.tools'.")
		}
		t.allowed = []string{}
		s := jsonwire.NewScanner(b[list.Start:list.End], jsonwire.Options{})
		_ = s.EnterArray()
		for i := 0; ; i++ {
			more, _ := s.NextElement()
			if !more {
				break
			}
			e, _ := s.ReadValue()
			e.Start += list.Start
			e.End += list.Start
			if e.Kind != jsonwire.Object {
				return nil, wrongType(fmt.Sprintf("tool_choice.tools[%d]", i), "an object")
			}
			if et := findMember(b, e, "type"); et.Kind != jsonwire.String || keyName(b, et) != "function" {
				return nil, invalid(fmt.Sprintf("tool_choice.tools[%d].type", i), "unsupported_value", "Only function tools are supported by this gateway.")
			}
			if en := findMember(b, e, "name"); en.Kind == jsonwire.String {
				t.allowed = append(t.allowed, keyName(b, en))
			}
		}
		return mode.Raw(b), nil
	default:
		return nil, invalid("tool_choice.type", "unsupported_value", "Tool type '%s' is not supported by this gateway.", tn)
	}
}

// textFormat writes text.format as chat's response_format: Responses has the json_schema's
// members flat, chat nests them under json_schema.
func (t *translator) textFormat(dst []byte, v jsonwire.Token) ([]byte, error) {
	b := t.body
	f := findMember(b, v, "format")
	if f.Kind == jsonwire.Invalid || f.Kind == jsonwire.Null {
		return dst, nil
	}
	tn, err := typeOf(b, f, "text.format", "an object")
	if err != nil {
		return nil, err
	}
	switch tn {
	case "text":
		return dst, nil
	case "json_object":
		return append(dst, `,"response_format":{"type":"json_object"}`...), nil
	case "json_schema":
		name, schema := findMember(b, f, "name"), findMember(b, f, "schema")
		if name.Kind != jsonwire.String {
			return nil, invalid("text.format.name", "missing_required_parameter", "Missing required parameter: 'text.format.name'.")
		}
		if schema.Kind != jsonwire.Object {
			return nil, invalid("text.format.schema", "missing_required_parameter", "Missing required parameter: 'text.format.schema'.")
		}
		dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		dst = appendStr(dst, strTok{b, name}, &t.scratch)
		dst = append(dst, `,"schema":`...)
		dst = append(dst, schema.Raw(b)...)
		if st := findMember(b, f, "strict"); isBool(st) {
			dst = append(dst, `,"strict":`...)
			dst = append(dst, st.Raw(b)...)
		}
		if d := findMember(b, f, "description"); d.Kind == jsonwire.String {
			dst = append(dst, `,"description":`...)
			dst = appendStr(dst, strTok{b, d}, &t.scratch)
		}
		return append(dst, "}}"...), nil
	default:
		return nil, invalid("text.format.type", "unsupported_value", "Unsupported value for 'text.format.type': '%s'.", tn)
	}
}

// ResponsesTurnItems is what one stored turn adds to its conversation: the request's input items
// (a string input as the user message it stands for) followed by the Response's output items,
// each one JSON value. A continuation by previous_response_id hands ResponsesToChat the parent's
// own prev followed by these (§5: context = parent's context, its input, its output; never its
// instructions). The items are views of request and response, which must not change while they
// are in use; a store copies them.
func ResponsesTurnItems(request, response []byte) ([]Raw, error) {
	var items []Raw
	in := findTop(request, "input")
	switch in.Kind {
	case jsonwire.String:
		item := append([]byte(`{"type":"message","role":"user","content":`), in.Raw(request)...)
		items = append(items, append(item, '}'))
	case jsonwire.Array:
		items = appendElements(items, request, in)
	case jsonwire.Invalid, jsonwire.Null:
	default:
		return nil, errors.New("openaiwire: a stored turn: the request's input is neither a string nor an array")
	}
	out := findTop(response, "output")
	if out.Kind != jsonwire.Array {
		return nil, errors.New("openaiwire: a stored turn: the response has no output array")
	}
	return appendElements(items, response, out), nil
}

// findTop is the value of the top-level member name of the document b (Kind Invalid when b is
// not a JSON object or has none).
func findTop(b []byte, name string) jsonwire.Token {
	if jsonwire.Validate(b, jsonwire.Options{}) != nil || jsonwire.KindOf(firstByte(b)) != jsonwire.Object {
		return jsonwire.Token{}
	}
	start := len(b) - len(trimLeft(b))
	end := len(trimSpace(b)) + start
	return findMember(b, jsonwire.Token{Start: start, End: end, Kind: jsonwire.Object}, name)
}

// appendElements appends the elements of the array v of src (checked already), as views.
func appendElements(dst []Raw, src []byte, v jsonwire.Token) []Raw {
	s := jsonwire.NewScanner(v.Raw(src), jsonwire.Options{})
	_ = s.EnterArray()
	for {
		if more, _ := s.NextElement(); !more {
			return dst
		}
		e, _ := s.ReadValue()
		dst = append(dst, Raw(src[v.Start+e.Start:v.Start+e.End:v.Start+e.End]))
	}
}
