package anthropic

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The Anthropic request, decoded strictly (decode.go): a field this package does not know is
// refused (Anthropic's own API does the same), so nothing a client sends is dropped without a
// word. The tags name the fields for the reader; the decoder does not use them.
type msgRequest struct {
	Model         *string         `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	Messages      list[inMessage] `json:"messages"`
	System        content         `json:"system"`
	Metadata      *metadata       `json:"metadata"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        *bool           `json:"stream"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	Thinking      *thinkingParam  `json:"thinking"`
	Tools         list[toolParam] `json:"tools"`
	ToolChoice    *toolChoice     `json:"tool_choice"`
	ServiceTier   *string         `json:"service_tier"`
	OutputConfig  *outputConfig   `json:"output_config"`
	CacheControl  json.RawMessage `json:"cache_control"`
	// Accepted and not sent: a speed tier and prompt-cache diagnostics have no counterpart, and
	// ignoring them changes no answer.
	Speed       json.RawMessage `json:"speed"`
	Diagnostics json.RawMessage `json:"diagnostics"`
	// Known, and refused when set: features of Anthropic's platform with no OpenAI counterpart.
	Container         json.RawMessage `json:"container"`
	MCPServers        json.RawMessage `json:"mcp_servers"`
	ContextManagement json.RawMessage `json:"context_management"`
	InferenceGeo      json.RawMessage `json:"inference_geo"`
}

type metadata struct {
	UserID *string `json:"user_id"`
}

type thinkingParam struct {
	Type         string `json:"type"`
	BudgetTokens int64  `json:"budget_tokens"`
	Display      string `json:"display"`
}

type toolParam struct {
	Type                string          `json:"type"`
	Name                string          `json:"name"`
	Description         *string         `json:"description"`
	InputSchema         json.RawMessage `json:"input_schema"`
	Strict              *bool           `json:"strict"`
	CacheControl        json.RawMessage `json:"cache_control"`
	EagerInputStreaming *bool           `json:"eager_input_streaming"`
	InputExamples       json.RawMessage `json:"input_examples"`
	DeferLoading        *bool           `json:"defer_loading"`
	AllowedCallers      json.RawMessage `json:"allowed_callers"`
}

type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

type outputConfig struct {
	Format *outputFormat `json:"format"`
	Effort string        `json:"effort"`
}

type outputFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

type inMessage struct {
	Role    string  `json:"role"`
	Content content `json:"content"`
}

// content is a string or a list of blocks, as a message's, a system prompt's and a tool
// result's content are.
type content struct {
	text   string
	blocks list[block]
	depth  int // 0 for a message's or the system prompt's, one more for each content around it
	isText bool
	set    bool // sent, and not null
}

// empty reports whether c holds nothing: "" or [] (or was not sent).
func (c *content) empty() bool {
	return !c.set || (c.isText && c.text == "") || (!c.isText && c.blocks.n == 0)
}

// block is every content block type's fields in one struct; type says which apply. An absent
// text and an empty one are the same (both refused where text is required).
type block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	CacheControl json.RawMessage `json:"cache_control"`
	Citations    json.RawMessage `json:"citations"`
	// image, document
	Source  source `json:"source"`
	Title   string `json:"title"`
	Context string `json:"context"`
	// tool_use
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input"`
	Caller json.RawMessage `json:"caller"`
	// tool_result
	ToolUseID string  `json:"tool_use_id"`
	Content   content `json:"content"`
	IsError   bool    `json:"is_error"`
	// thinking, redacted_thinking
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
	Data      string `json:"data"`
}

type source struct {
	Type      string  `json:"type"`
	MediaType string  `json:"media_type"`
	Data      string  `json:"data"`
	URL       string  `json:"url"`
	FileID    string  `json:"file_id"`
	Content   content `json:"content"`
	set       bool    // sent, and not null
}

// translated is an Anthropic request as an OpenAI chat completions body.
type translated struct {
	body   []byte
	model  string
	stream bool
	// estimate is the prompt's size in tokens, guessed (estimateTokens): what message_start
	// reports before the upstream's count arrives, and count_tokens without a tokenizer.
	estimate int
}

// Bounds on what one request may hold, beyond the body's byte limit (and maxBlocks, maxNesting
// and maxDepth): each item costs work however small its bytes. 100,000 messages is Anthropic's
// own limit.
const (
	maxMessages = 100_000
	maxTools    = 4096
	maxStops    = 1024
)

// billingHeader starts the system block Claude Code sends with a per-request hash: passed on, it
// would make every prompt's prefix differ (no prefix cache, no response cache), and it is
// metadata for Anthropic's billing, not part of the prompt. vLLM's own /v1/messages drops it too.
const billingHeader = "x-anthropic-billing-header"

// translate validates an Anthropic Messages request and writes it as an OpenAI chat completions
// body. count is true for count_tokens, whose requests carry neither max_tokens nor stream. The
// error is Anthropic's 400 naming the field at fault.
func translate(body []byte, count bool) (*translated, *apiError) {
	return translateStoring(body, count, maxPooled)
}

// translateStoring is translate with at most store messages, tools and blocks decoded into
// storage, the rest read from the body: the tests' way to read every list from it (0).
func translateStoring(body []byte, count bool, store int) (*translated, *apiError) {
	d := newDecoder()
	defer d.release()
	d.storeMax = store
	var req msgRequest
	if err := decodeRequest(d, body, &req); err != nil {
		return nil, err
	}
	t := &tr{b: make([]byte, 0, len(body)+256), d: d}
	if err := t.request(&req, count); err != nil {
		return nil, err
	}
	// The model's name is a substring of the decoder's copy of the body: cloned, so that copy
	// is not kept for as long as the request lasts.
	return &translated{body: t.b, model: strings.Clone(*req.Model), stream: req.Stream != nil && *req.Stream, estimate: estimateTokens(t.chars, t.images)}, nil
}

// estimateTokens guesses a prompt's tokens: a quarter of its text's bytes (about right for
// English with BPE vocabularies; an overestimate for code, an underestimate for CJK) plus 1600
// per image (an image of about 1.15 megapixels, Anthropic's w*h/750), rounded up.
func estimateTokens(chars, images int) int {
	return (chars+3)/4 + images*1600
}

// tr writes one translation.
type tr struct {
	b       []byte
	d       *decoder // for the walks of the request's lists
	chars   int      // bytes of text, for the estimate
	images  int
	prefill bool // the conversation ends in an assistant turn with content
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

func (t *tr) request(req *msgRequest, count bool) *apiError {
	switch {
	case req.Model == nil || *req.Model == "":
		return invalid("model: Field required")
	case !count && req.MaxTokens == nil:
		return invalid("max_tokens: Field required")
	case !count && *req.MaxTokens < 1:
		return invalid("max_tokens: must be at least 1 (a model served through an OpenAI chat upstream cannot pre-warm a prompt cache with 0)")
	case !req.Messages.set:
		return invalid("messages: Field required")
	case req.Messages.n == 0:
		return invalid("messages: at least one message is required")
	case count && req.Stream != nil:
		return invalid("stream: Extra inputs are not permitted")
	case req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 1):
		return invalid("temperature: must be between 0 and 1")
	case req.TopP != nil && (*req.TopP < 0 || *req.TopP > 1):
		return invalid("top_p: must be between 0 and 1")
	case req.TopK != nil && *req.TopK < 0:
		return invalid("top_k: must be at least 0")
	case present(req.Container):
		return unsupported("container", "code execution containers are Anthropic's platform")
	case present(req.MCPServers):
		return unsupported("mcp_servers", "the MCP connector runs on Anthropic's platform")
	case present(req.ContextManagement):
		return unsupported("context_management", "context editing runs on Anthropic's platform")
	case present(req.InferenceGeo):
		return unsupported("inference_geo", "it names Anthropic's regions")
	}
	if req.ServiceTier != nil && *req.ServiceTier != "auto" && *req.ServiceTier != "standard_only" {
		return invalid("service_tier: must be one of auto, standard_only")
	}
	b := append(t.b, `{"model":`...)
	b = appendString(b, *req.Model)
	b = append(b, `,"messages":[`...)
	t.b = b
	if req.System.set {
		if err := t.system(&req.System, rootPath("system")); err != nil {
			return err
		}
	}
	if err := t.messages(&req.Messages); err != nil {
		return err
	}
	b = append(t.b, ']')
	if req.MaxTokens != nil {
		b = append(b, `,"max_tokens":`...)
		b = appendInt(b, *req.MaxTokens)
	}
	if req.Stream != nil && *req.Stream {
		// include_usage: the last chunk carries the usage message_delta reports.
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	if req.Temperature != nil {
		b = append(b, `,"temperature":`...)
		b = appendFloat(b, *req.Temperature)
	}
	if req.TopP != nil {
		b = append(b, `,"top_p":`...)
		b = appendFloat(b, *req.TopP)
	}
	if req.TopK != nil {
		b = append(b, `,"top_k":`...) // vLLM's sampling extra; OpenAI itself has none
		b = appendInt(b, *req.TopK)
	}
	if len(req.StopSequences) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range req.StopSequences {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	if req.Metadata != nil && req.Metadata.UserID != nil {
		b = append(b, `,"user":`...)
		b = appendString(b, *req.Metadata.UserID)
	}
	t.b = b
	if err := t.tools(&req.Tools, req.ToolChoice); err != nil {
		return err
	}
	if err := t.reasoning(req.Thinking, req.OutputConfig); err != nil {
		return err
	}
	if t.prefill {
		// A final assistant turn is a prefill the answer continues; vLLM's chat extras say so
		// (an upstream without them refuses the request: a 400, not a different answer).
		t.b = append(t.b, `,"continue_final_message":true,"add_generation_prompt":false`...)
	}
	t.b = append(t.b, '}')
	return nil
}

// path names a place in the request for an error message: a value the translator extends as it
// descends, written out only when there is an error to report. (Not a chain of pointers: the
// translator's recursion would move every link to the heap.)
type path struct {
	n    int
	segs [10]pathSeg // messages.1.content.2.content.3.source.content.4 is the deepest
}

type pathSeg struct {
	key string // "" for an index
	idx int
}

func rootPath(key string) path { return path{n: 1, segs: [10]pathSeg{{key: key}}} }

func (p path) key(k string) path {
	if p.n < len(p.segs) {
		p.segs[p.n] = pathSeg{key: k}
		p.n++
	}
	return p
}

func (p path) at(i int) path {
	if p.n < len(p.segs) {
		p.segs[p.n] = pathSeg{idx: i}
		p.n++
	}
	return p
}

func (p *path) String() string {
	b := make([]byte, 0, 32)
	for i, s := range p.segs[:p.n] {
		if i > 0 {
			b = append(b, '.')
		}
		if s.key != "" {
			b = append(b, s.key...)
		} else {
			b = strconv.AppendInt(b, int64(s.idx), 10)
		}
	}
	return string(b)
}

func unsupported(field, why string) *apiError {
	return invalid(fmt.Sprintf("%s: not supported for a model served through an OpenAI chat upstream (%s)", field, why))
}

// system writes a system prompt (or a system message of the conversation) as a system message:
// text only, its blocks joined by newlines.
func (t *tr) system(c *content, field path) *apiError {
	if c.isText {
		if c.text == "" {
			return nil
		}
		t.b = append(t.b, `{"role":"system","content":`...)
		t.b = appendString(t.b, c.text)
		t.b = append(t.b, '}')
		t.chars += len(c.text)
		return nil
	}
	n := 0
	for w := t.d.blocks(c); w.next(); {
		i, bl := w.i, w.cur
		if bl.Type != "text" {
			return invalid(fmt.Sprintf("%s.%d.type: a system prompt holds text blocks only, not %q", field.String(), i, bl.Type))
		}
		if bl.Text == "" {
			return invalid(fmt.Sprintf("%s.%d: text content blocks must be non-empty", field.String(), i))
		}
		if strings.HasPrefix(bl.Text, billingHeader) {
			continue
		}
		if n == 0 {
			t.b = append(t.b, `{"role":"system","content":"`...)
		} else {
			t.b = append(t.b, `\n`...)
		}
		t.b = appendStringInner(t.b, bl.Text)
		t.chars += len(bl.Text)
		n++
	}
	if n > 0 {
		t.b = append(t.b, `"}`...)
	}
	return nil
}

// messages writes the conversation. Roles must start with user (after any system turns); every
// tool_use must be answered by a tool_result in the next turn, and every tool_result must answer
// a tool_use of the turn before, as Anthropic's API requires: an OpenAI upstream would refuse
// the same conversation with a less helpful message, or worse, accept it.
func (t *tr) messages(msgs *list[inMessage]) *apiError {
	var pending awaited // tool_use ids of the previous assistant turn not yet answered
	seenUser := false
	for w := t.d.messages(msgs); w.next(); {
		i, m := w.i, w.cur
		field := rootPath("messages").at(i)
		if !m.Content.set {
			return invalid(field.String() + ".content: Field required")
		}
		last := i == msgs.n-1
		t.prefill = last && m.Role == "assistant" && !m.Content.empty()
		switch m.Role {
		case "system":
			if pending.left > 0 {
				return unanswered(field.String(), &pending)
			}
			t.sep()
			if err := t.system(&m.Content, field.key("content")); err != nil {
				return err
			}
			t.trimSep()
		case "user":
			seenUser = true
			var err *apiError
			if err = t.user(&m.Content, field, &pending); err != nil {
				return err
			}
		case "assistant":
			if !seenUser {
				return invalid(`messages: the first message must use the "user" role`)
			}
			if pending.left > 0 {
				return unanswered(field.String(), &pending)
			}
			if m.Content.empty() {
				if last {
					continue // an empty prefill is no prefill
				}
				return invalid(field.String() + ": all messages must have non-empty content except for the optional final assistant message")
			}
			var err *apiError
			if pending, err = t.assistant(&m.Content, field); err != nil {
				return err
			}
			if last && pending.left > 0 {
				return unanswered(field.String(), &pending)
			}
		case "":
			return invalid(field.String() + ".role: Field required")
		default:
			return invalid(fmt.Sprintf(`%s.role: Input should be "user" or "assistant", not %q`, field.String(), m.Role))
		}
	}
	if !seenUser {
		return invalid(`messages: the first message must use the "user" role`)
	}
	return nil
}

func unanswered(field string, pending *awaited) *apiError {
	return invalid(fmt.Sprintf("%s: tool_use ids were found without tool_result blocks immediately after: %s. "+
		"Each tool_use block must have a corresponding tool_result block in the next message.", field, strings.Join(pending.unanswered(), ", ")))
}

// sep starts a new element of the messages array; trimSep takes it back if nothing followed.
func (t *tr) sep() {
	if t.b[len(t.b)-1] != '[' {
		t.b = append(t.b, ',')
	}
}

func (t *tr) trimSep() {
	if t.b[len(t.b)-1] == ',' {
		t.b = t.b[:len(t.b)-1]
	}
}

// user writes a user turn: its tool results first, as OpenAI tool messages (which must follow the
// assistant's tool calls directly), then the rest of its content as one user message.
func (t *tr) user(c *content, field path, pending *awaited) *apiError {
	if c.empty() {
		return invalid(field.String() + ": all messages must have non-empty content except for the optional final assistant message")
	}
	if c.isText {
		if pending.left > 0 {
			return unanswered(field.String(), pending)
		}
		t.sep()
		t.b = append(t.b, `{"role":"user","content":`...)
		t.b = appendString(t.b, c.text)
		t.b = append(t.b, '}')
		t.chars += len(c.text)
		return nil
	}
	// The tool results are written as they come; the rest is counted, and when it is one text
	// block, its text kept for the content string.
	others := 0
	only := ""
	for w := t.d.blocks(c); w.next(); {
		i, bl := w.i, w.cur
		if bl.Type != "tool_result" {
			if others++; others == 1 && bl.Type == "text" {
				only = bl.Text
			}
			continue
		}
		bf := field.key("content").at(i)
		if !pending.answer(bl.ToolUseID) {
			if bl.ToolUseID == "" {
				return invalid(bf.String() + ".tool_use_id: Field required")
			}
			return invalid(fmt.Sprintf("%s: unexpected tool_use_id found in tool_result blocks: %s. Each tool_result block must have a "+
				"corresponding tool_use block in the previous message.", bf.String(), bl.ToolUseID))
		}
		if err := t.toolResult(bl, bf); err != nil {
			return err
		}
	}
	if pending.left > 0 {
		return unanswered(field.String(), pending)
	}
	if others == 0 {
		return nil
	}
	t.sep()
	t.b = append(t.b, `{"role":"user","content":`...)
	if others == 1 && only != "" {
		t.b = appendString(t.b, only)
		t.chars += len(only)
	} else {
		t.b = append(t.b, '[')
		if err := t.partList(c, field.key("content")); err != nil {
			return err
		}
		t.b = append(t.b, ']')
	}
	t.b = append(t.b, '}')
	return nil
}

// toolResult writes a tool_result block as an OpenAI tool message. OpenAI has no error flag: an
// error's content is marked with a leading "Error: ", as the model would read it in a transcript.
func (t *tr) toolResult(bl *block, field path) *apiError {
	t.sep()
	t.b = append(t.b, `{"role":"tool","tool_call_id":`...)
	t.b = appendString(t.b, bl.ToolUseID)
	t.b = append(t.b, `,"content":`...)
	switch c := &bl.Content; {
	case !c.set || c.isText:
		if bl.IsError {
			t.b = append(t.b, `"Error: `...)
			t.b = appendStringInner(t.b, c.text)
			t.b = append(t.b, '"')
		} else {
			t.b = appendString(t.b, c.text)
		}
		t.chars += len(c.text)
	default:
		if bl.IsError {
			// partList puts its own commas before its parts.
			t.b = append(t.b, `[{"type":"text","text":"Error: "}`...)
			if err := t.partList(c, field.key("content")); err != nil {
				return err
			}
			t.b = append(t.b, ']')
		} else if err := t.parts(c, field.key("content")); err != nil {
			return err
		}
	}
	t.b = append(t.b, '}')
	return nil
}

// parts writes a list of content blocks as an OpenAI message's content: a string when they are
// one text block, else a list of parts.
func (t *tr) parts(c *content, field path) *apiError {
	switch c.blocks.n {
	case 0:
		t.b = append(t.b, `""`...)
		return nil
	case 1:
		w := t.d.blocks(c)
		if w.next(); w.cur.Type == "text" && w.cur.Text != "" {
			t.b = appendString(t.b, w.cur.Text)
			t.chars += len(w.cur.Text)
			return nil
		}
	}
	t.b = append(t.b, '[')
	if err := t.partList(c, field); err != nil {
		return err
	}
	t.b = append(t.b, ']')
	return nil
}

// partList writes c's blocks as OpenAI content parts, comma separated, tool results skipped.
func (t *tr) partList(c *content, field path) *apiError {
	for w := t.d.blocks(c); w.next(); {
		bl := w.cur
		bf := field.at(w.i)
		switch bl.Type {
		case "tool_result":
			continue
		case "text":
			if bl.Text == "" {
				return invalid(bf.String() + ": text content blocks must be non-empty")
			}
			t.b = appendComma(t.b)
			t.textPart(bl.Text)
		case "image":
			if err := t.image(bl, bf); err != nil {
				return err
			}
		case "document":
			if err := t.document(bl, bf); err != nil {
				return err
			}
		case "tool_use":
			return invalid(bf.String() + ": tool_use blocks belong in assistant messages")
		case "thinking", "redacted_thinking":
			return invalid(bf.String() + ": " + bl.Type + " blocks belong in assistant messages")
		case "":
			return invalid(bf.String() + ".type: Field required")
		default:
			return untranslatable(bf.String(), bl.Type)
		}
	}
	return nil
}

func untranslatable(field, typ string) *apiError {
	return invalid(fmt.Sprintf("%s.type: content blocks of type %q cannot be translated for a model served through an OpenAI chat upstream", field, typ))
}

func (t *tr) textPart(s string) {
	t.b = append(t.b, `{"type":"text","text":`...)
	t.b = appendString(t.b, s)
	t.b = append(t.b, '}')
	t.chars += len(s)
}

var imageTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// image writes an image block as an image_url part: base64 data as a data: URL, a URL as is.
func (t *tr) image(bl *block, field path) *apiError {
	s := &bl.Source
	if !s.set {
		return invalid(field.String() + ".source: Field required")
	}
	t.b = appendComma(t.b)
	switch s.Type {
	case "base64":
		if !imageTypes[s.MediaType] {
			return invalid(fmt.Sprintf("%s.source.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'", field.String()))
		}
		if s.Data == "" {
			return invalid(field.String() + ".source.data: Field required")
		}
		t.b = append(t.b, `{"type":"image_url","image_url":{"url":"data:`...)
		t.b = append(t.b, s.MediaType...) // one of imageTypes: nothing to escape
		t.b = append(t.b, ";base64,"...)
		t.b = appendStringInner(t.b, s.Data)
		t.b = append(t.b, `"}}`...)
	case "url":
		if s.URL == "" {
			return invalid(field.String() + ".source.url: Field required")
		}
		t.b = append(t.b, `{"type":"image_url","image_url":{"url":`...)
		t.b = appendString(t.b, s.URL)
		t.b = append(t.b, `}}`...)
	case "file":
		return unsupported(field.String()+".source", "files uploaded to Anthropic's Files API are not here")
	default:
		return invalid(fmt.Sprintf("%s.source.type: Input should be 'base64', 'url' or 'file', not %q", field.String(), s.Type))
	}
	t.images++
	return nil
}

// document writes a document block: plain text (and a content list's text and images) as text
// parts, a base64 PDF as OpenAI's file part. The title and context are written as text before
// it, so the model reads them as Anthropic's would. Citations cannot be produced.
func (t *tr) document(bl *block, field path) *apiError {
	s := &bl.Source
	if !s.set {
		return invalid(field.String() + ".source: Field required")
	}
	if present(bl.Citations) {
		var c struct{ Enabled bool }
		if json.Unmarshal(bl.Citations, &c) == nil && c.Enabled {
			return unsupported(field.String()+".citations", "an OpenAI chat upstream cannot cite documents")
		}
	}
	if bl.Title != "" {
		t.b = appendComma(t.b)
		t.textPart(bl.Title)
	}
	if bl.Context != "" {
		t.b = appendComma(t.b)
		t.textPart(bl.Context)
	}
	switch s.Type {
	case "text":
		if s.Data == "" {
			return invalid(field.String() + ".source.data: Field required")
		}
		t.b = appendComma(t.b)
		t.textPart(s.Data)
	case "content":
		if s.Content.empty() {
			return invalid(field.String() + ".source.content: Field required")
		}
		if s.Content.isText {
			t.b = appendComma(t.b)
			t.textPart(s.Content.text)
			break
		}
		for w := t.d.blocks(&s.Content); w.next(); {
			if typ := w.cur.Type; typ != "text" && typ != "image" {
				return invalid(fmt.Sprintf("%s.source.content.%d.type: a document's content holds text and image blocks only, not %q", field.String(), w.i, typ))
			}
		}
		if err := t.partList(&s.Content, field.key("source.content")); err != nil {
			return err
		}
	case "base64":
		if s.MediaType != "application/pdf" {
			return invalid(field.String() + ".source.media_type: Input should be 'application/pdf'")
		}
		if s.Data == "" {
			return invalid(field.String() + ".source.data: Field required")
		}
		name := "document.pdf"
		if bl.Title != "" {
			name = bl.Title
		}
		t.b = appendComma(t.b)
		t.b = append(t.b, `{"type":"file","file":{"filename":`...)
		t.b = appendString(t.b, name)
		t.b = append(t.b, `,"file_data":"data:application/pdf;base64,`...)
		t.b = appendStringInner(t.b, s.Data)
		t.b = append(t.b, `"}}`...)
		t.chars += len(s.Data) / 2 // a PDF's text is a fraction of its bytes: a rough guess
	case "url":
		return unsupported(field.String()+".source", "OpenAI's file parts take the document's bytes, not a URL")
	case "file":
		return unsupported(field.String()+".source", "files uploaded to Anthropic's Files API are not here")
	default:
		return invalid(fmt.Sprintf("%s.source.type: Input should be 'base64', 'text', 'content', 'url' or 'file', not %q", field.String(), s.Type))
	}
	return nil
}

// assistant writes an assistant turn: its text as content, its tool_use blocks as tool calls
// (input re-encoded as the arguments string). Thinking blocks are not sent: OpenAI's chat API
// has no place for earlier turns' reasoning, and Anthropic's API itself does not show the model
// the thinking of turns before the last. It returns the tool_use ids to be answered.
func (t *tr) assistant(c *content, field path) (awaited, *apiError) {
	t.sep()
	t.b = append(t.b, `{"role":"assistant","content":`...)
	if c.isText {
		t.b = appendString(t.b, c.text)
		t.b = append(t.b, '}')
		t.chars += len(c.text)
		return awaited{}, nil
	}
	// The blocks are checked and their texts written in one walk, joined: an assistant turn is
	// one string in every chat template. The tool calls follow in a second.
	texts, calls := 0, 0
	for w := t.d.blocks(c); w.next(); {
		bl := w.cur
		bf := field.key("content").at(w.i)
		switch bl.Type {
		case "text":
			if bl.Text == "" {
				return awaited{}, invalid(bf.String() + ": text content blocks must be non-empty")
			}
			if texts == 0 {
				t.b = append(t.b, '"')
			} else {
				t.b = append(t.b, `\n`...)
			}
			t.b = appendStringInner(t.b, bl.Text)
			t.chars += len(bl.Text)
			texts++
		case "tool_use":
			switch {
			case bl.ID == "":
				return awaited{}, invalid(bf.String() + ".id: Field required")
			case bl.Name == "":
				return awaited{}, invalid(bf.String() + ".name: Field required")
			case !isObject(bl.Input):
				return awaited{}, invalid(bf.String() + ".input: Input should be an object")
			}
			calls++
		case "thinking", "redacted_thinking":
		case "":
			return awaited{}, invalid(bf.String() + ".type: Field required")
		case "image", "document", "tool_result":
			return awaited{}, invalid(fmt.Sprintf("%s.type: %s blocks belong in user messages", bf.String(), bl.Type))
		default:
			return awaited{}, untranslatable(bf.String(), bl.Type)
		}
	}
	if texts == 0 {
		t.b = append(t.b, "null"...)
	} else {
		t.b = append(t.b, '"')
	}
	if calls == 0 {
		t.b = append(t.b, '}')
		return awaited{}, nil
	}
	ids := make([]string, 0, calls)
	t.b = append(t.b, `,"tool_calls":[`...)
	for w := t.d.blocks(c); w.next(); {
		bl := w.cur
		if bl.Type != "tool_use" {
			continue
		}
		if len(ids) > 0 {
			t.b = append(t.b, ',')
		}
		t.b = append(t.b, `{"id":`...)
		t.b = appendString(t.b, bl.ID)
		t.b = append(t.b, `,"type":"function","function":{"name":`...)
		t.b = appendString(t.b, bl.Name)
		t.b = append(t.b, `,"arguments":`...)
		t.b = appendCompactString(t.b, bl.Input)
		t.b = append(t.b, `}}`...)
		t.chars += len(bl.Name) + len(bl.Input)
		ids = append(ids, bl.ID)
	}
	t.b = append(t.b, "]}"...)
	return awaiting(ids), nil
}

func isObject(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '{' }

// appendCompactString appends raw JSON without insignificant spaces, as a JSON string (OpenAI's
// arguments are one): what json.Compact then appendString write. raw is valid JSON (the decoder
// checked it) in a valid UTF-8 body: outside its string literals there is nothing to escape but
// the spaces dropped, and each literal is written as jsonwire's contents of a string (its quotes
// and backslashes escaped).
func appendCompactString(b []byte, raw json.RawMessage) []byte {
	b = append(b, '"')
	start := 0 // the start of the bytes not yet appended
	for i := 0; i < len(raw); {
		switch raw[i] {
		case '"':
			end, err := jsonwire.SkipValue(raw, i, jsonwire.Options{MaxDepth: -1})
			if err != nil { // not valid JSON after all: the rest as one string's contents
				end = len(raw)
			}
			b = append(b, raw[start:i]...)
			b = jsonwire.AppendContents(b, raw[i:end], jsonwire.Minimal)
			i, start = end, end
		case ' ', '\t', '\n', '\r':
			b = append(b, raw[start:i]...)
			i++
			start = i
		default:
			i++
		}
	}
	b = append(b, raw[start:]...)
	return append(b, '"')
}

// tools writes the tool definitions (custom tools as functions) and the tool choice.
func (t *tr) tools(tools *list[toolParam], choice *toolChoice) *apiError {
	for w := t.d.toolList(tools); w.next(); {
		i, tl := w.i, w.cur
		field := rootPath("tools").at(i)
		switch {
		case tl.Type != "" && tl.Type != "custom":
			return unsupported(field.String()+".type", fmt.Sprintf("%q is a server tool that runs on Anthropic's platform", tl.Type))
		case tl.Name == "":
			return invalid(field.String() + ".name: Field required")
		case !present(tl.InputSchema):
			return invalid(field.String() + ".input_schema: Field required")
		case !isObject(tl.InputSchema):
			return invalid(field.String() + ".input_schema: Input should be an object")
		case tl.DeferLoading != nil && *tl.DeferLoading:
			return unsupported(field.String()+".defer_loading", "tool search runs on Anthropic's platform")
		case present(tl.AllowedCallers):
			return unsupported(field.String()+".allowed_callers", "programmatic tool calling runs on Anthropic's platform")
		case present(tl.InputExamples) && string(tl.InputExamples) != "[]":
			return unsupported(field.String()+".input_examples", "an OpenAI function has no examples")
		}
		if i == 0 {
			t.b = append(t.b, `,"tools":[`...)
		} else {
			t.b = append(t.b, ',')
		}
		t.b = append(t.b, `{"type":"function","function":{"name":`...)
		t.b = appendString(t.b, tl.Name)
		if tl.Description != nil {
			t.b = append(t.b, `,"description":`...)
			t.b = appendString(t.b, *tl.Description)
			t.chars += len(*tl.Description)
		}
		t.b = append(t.b, `,"parameters":`...)
		t.b = append(t.b, tl.InputSchema...)
		if tl.Strict != nil {
			t.b = append(t.b, `,"strict":`...)
			t.b = appendBool(t.b, *tl.Strict)
		}
		t.b = append(t.b, `}}`...)
		t.chars += len(tl.Name) + len(tl.InputSchema)
	}
	if tools.n > 0 {
		t.b = append(t.b, ']')
	}
	if choice == nil {
		return nil
	}
	t.b = append(t.b, `,"tool_choice":`...)
	switch choice.Type {
	case "auto":
		t.b = append(t.b, `"auto"`...)
	case "any":
		t.b = append(t.b, `"required"`...)
	case "none":
		t.b = append(t.b, `"none"`...)
	case "tool":
		if choice.Name == "" {
			return invalid("tool_choice.name: Field required")
		}
		t.b = append(t.b, `{"type":"function","function":{"name":`...)
		t.b = appendString(t.b, choice.Name)
		t.b = append(t.b, `}}`...)
	default:
		return invalid(fmt.Sprintf("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none', not %q", choice.Type))
	}
	if choice.DisableParallelToolUse {
		t.b = append(t.b, `,"parallel_tool_calls":false`...)
	}
	return nil
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}

// reasoning writes extended thinking and output_config: a thinking budget as OpenAI's
// reasoning_effort (low under 4096 tokens, medium under 16384, high above; "adaptive" leaves the
// model's default), effort as reasoning_effort, a JSON schema format as response_format.
func (t *tr) reasoning(th *thinkingParam, oc *outputConfig) *apiError {
	effort := ""
	if th != nil {
		switch th.Type {
		case "enabled":
			switch {
			case th.BudgetTokens < 1024:
				return invalid("thinking.budget_tokens: must be at least 1024")
			case th.BudgetTokens < 4096:
				effort = "low"
			case th.BudgetTokens < 16384:
				effort = "medium"
			default:
				effort = "high"
			}
		case "disabled", "adaptive":
		default:
			return invalid(fmt.Sprintf("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive', not %q", th.Type))
		}
	}
	if oc != nil {
		if oc.Effort != "" {
			effort = oc.Effort
		}
		if f := oc.Format; f != nil {
			if f.Type != "json_schema" {
				return invalid(fmt.Sprintf("output_config.format.type: Input should be 'json_schema', not %q", f.Type))
			}
			if !isObject(f.Schema) {
				return invalid("output_config.format.schema: Input should be an object")
			}
			t.b = append(t.b, `,"response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":`...)
			t.b = append(t.b, f.Schema...)
			t.b = append(t.b, `}}`...)
		}
	}
	if effort != "" {
		t.b = append(t.b, `,"reasoning_effort":`...)
		t.b = appendString(t.b, effort)
	}
	return nil
}
