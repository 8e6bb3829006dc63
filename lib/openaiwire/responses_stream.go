package openaiwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The answer's side of the Responses translation: a chat completion (ChatToResponse) or a chat
// stream (ResponsesStream) to a Response. Both build the same output items and write them with
// the same writer, so that a streamed answer's final response.completed carries exactly what the
// whole answer's Response would: the Agents SDK runs its tools from that event's output.

// Output item kinds.
const (
	kindMessage uint8 = iota + 1
	kindCall
	kindReasoning
)

// outItem is one output item: a message's text, a reasoning's text or a call's arguments in
// text.
type outItem struct {
	kind         uint8
	incomplete   bool   // the item was cut short (the answer's last item, on length or failure)
	text         []byte // message text, reasoning text, or call arguments
	refusal      *string
	callID, name string
}

// respUsage is a chat usage in the Responses names.
type respUsage struct {
	input, output, total, cached, reasoning int64
}

// respView is a Response to write: the meta, the output and how it ended.
type respView struct {
	meta       *ResponsesMeta
	ids        itemIDs
	status     string // in_progress, completed, incomplete, failed, cancelled
	items      []outItem
	usage      *respUsage
	incomplete string // incomplete_details.reason
	errMsg     string // error.message when failed
}

// itemIDs mints the output items' ids from the response's: msg_, fc_ or rs_, the response id's
// suffix, and the item's output_index. Derived ids need no randomness here and are the same in
// every event of a stream, in its final Response and in ChatToResponse's.
type itemIDs struct{ suffix []byte } // JSON string contents

func newItemIDs(respID string) itemIDs {
	return itemIDs{suffix: jsonwire.AppendContents(nil, strings.TrimPrefix(respID, "resp_"), respEsc)}
}

func (ids itemIDs) appendID(dst []byte, kind uint8, index int) []byte {
	switch kind {
	case kindMessage:
		dst = append(dst, `"msg_`...)
	case kindCall:
		dst = append(dst, `"fc_`...)
	default:
		dst = append(dst, `"rs_`...)
	}
	dst = append(dst, ids.suffix...)
	dst = append(dst, '_')
	dst = strconv.AppendInt(dst, int64(index), 10)
	return append(dst, '"')
}

// callIDFor is the call_id of the call at output index: the upstream's tool-call id verbatim
// (vLLM's chatcmpl-tool-…, Kimi's functions.name:0, a format its chat template reads back),
// minted only when it is empty or another call of the answer has it already.
func callIDFor(items []outItem, id string, suffix []byte, index int) string {
	if id != "" {
		dup := false
		for i := range items {
			if items[i].kind == kindCall && items[i].callID == id {
				dup = true
				break
			}
		}
		if !dup {
			return id
		}
	}
	return "call_" + string(suffix) + "_" + strconv.Itoa(index)
}

// finishStatus is a Response's status for a chat finish_reason, and incomplete_details.reason.
func finishStatus(reason string) (status, incomplete string) {
	switch reason {
	case "length":
		return "incomplete", "max_output_tokens"
	case "content_filter":
		return "incomplete", "content_filter"
	case "abort":
		return "cancelled", ""
	case "error":
		return "failed", ""
	}
	return "completed", ""
}

// appendItem writes an output item: whole, or (added) as output_item.added has it, in
// progress and empty.
func appendItem(dst []byte, ids itemIDs, index int, it *outItem, added bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = ids.appendID(dst, it.kind, index)
	status := `"completed"`
	if added {
		status = `"in_progress"`
	} else if it.incomplete {
		status = `"incomplete"`
	}
	switch it.kind {
	case kindMessage:
		dst = append(dst, `,"type":"message","status":`...)
		dst = append(dst, status...)
		dst = append(dst, `,"role":"assistant","content":[`...)
		if !added {
			if it.refusal == nil || len(it.text) > 0 {
				dst = appendTextPart(dst, it.text)
			}
			if it.refusal != nil {
				if len(it.text) > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"type":"refusal","refusal":`...)
				dst = jsonwire.AppendString(dst, *it.refusal, respEsc)
				dst = append(dst, '}')
			}
		}
		return append(dst, "]}"...)
	case kindCall:
		dst = append(dst, `,"type":"function_call","status":`...)
		dst = append(dst, status...)
		dst = append(dst, `,"arguments":`...)
		if added {
			dst = append(dst, `""`...)
		} else {
			dst = jsonwire.AppendString(dst, it.text, respEsc)
		}
		dst = append(dst, `,"call_id":`...)
		dst = jsonwire.AppendString(dst, it.callID, respEsc)
		dst = append(dst, `,"name":`...)
		dst = jsonwire.AppendString(dst, it.name, respEsc)
		return append(dst, '}')
	}
	// summary must be an array, even empty: the Agents SDK maps over it.
	dst = append(dst, `,"type":"reasoning","status":`...)
	dst = append(dst, status...)
	dst = append(dst, `,"summary":[],"content":[`...)
	if !added {
		dst = appendReasoningPart(dst, it.text)
	}
	return append(dst, "]}"...)
}

func appendTextPart(dst, text []byte) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = jsonwire.AppendString(dst, text, respEsc)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

func appendReasoningPart(dst, text []byte) []byte {
	dst = append(dst, `{"type":"reasoning_text","text":`...)
	dst = jsonwire.AppendString(dst, text, respEsc)
	return append(dst, '}')
}

// appendResponse writes a Response object. Absent request parameters are written with
// OpenAI's defaults, which the SDKs' types expect present.
func appendResponse(dst []byte, r *respView) []byte {
	m := r.meta
	dst = append(dst, `{"id":`...)
	dst = jsonwire.AppendString(dst, m.ID, respEsc)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, m.CreatedAt, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, r.status...)
	dst = append(dst, `","background":`...)
	dst = strconv.AppendBool(dst, m.Background)
	dst = append(dst, `,"completed_at":`...)
	if r.status == "completed" && m.CompletedAt != 0 {
		dst = strconv.AppendInt(dst, m.CompletedAt, 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"error":`...)
	if r.status == "failed" {
		dst = append(dst, `{"code":"server_error","message":`...)
		dst = jsonwire.AppendString(dst, r.errMsg, respEsc)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if r.incomplete != "" {
		dst = append(dst, `{"reason":"`...)
		dst = append(dst, r.incomplete...)
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendEcho(dst, `,"instructions":`, m.Instructions, "null")
	dst = appendEcho(dst, `,"max_output_tokens":`, m.MaxOutputTokens, "null")
	dst = appendEcho(dst, `,"metadata":`, m.Metadata, "{}")
	dst = append(dst, `,"model":`...)
	dst = jsonwire.AppendString(dst, m.Model, respEsc)
	dst = append(dst, `,"output":[`...)
	for i := range r.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, r.ids, i, &r.items[i], false)
	}
	dst = append(dst, ']')
	dst = appendEcho(dst, `,"parallel_tool_calls":`, m.ParallelToolCalls, "true")
	dst = append(dst, `,"previous_response_id":`...)
	dst = appendStringOrEmptyNull(dst, m.PreviousResponseID)
	dst = appendEcho(dst, `,"reasoning":`, m.Reasoning, `{"effort":null,"summary":null}`)
	dst = append(dst, `,"store":`...)
	dst = strconv.AppendBool(dst, m.Store)
	dst = appendEcho(dst, `,"temperature":`, m.Temperature, "null")
	dst = appendEcho(dst, `,"text":`, m.Text, `{"format":{"type":"text"}}`)
	dst = appendEcho(dst, `,"tool_choice":`, m.ToolChoice, `"auto"`)
	dst = appendEcho(dst, `,"tools":`, m.Tools, "[]")
	dst = appendEcho(dst, `,"top_p":`, m.TopP, "null")
	dst = appendEcho(dst, `,"truncation":`, m.Truncation, `"disabled"`)
	dst = append(dst, `,"usage":`...)
	if u := r.usage; u != nil {
		dst = append(dst, `{"input_tokens":`...)
		dst = strconv.AppendInt(dst, u.input, 10)
		dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, u.cached, 10)
		dst = append(dst, `},"output_tokens":`...)
		dst = strconv.AppendInt(dst, u.output, 10)
		dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
		dst = strconv.AppendInt(dst, u.reasoning, 10)
		dst = append(dst, `},"total_tokens":`...)
		dst = strconv.AppendInt(dst, u.total, 10)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = appendEcho(dst, `,"user":`, m.User, "null")
	return append(dst, '}')
}

func appendEcho(dst []byte, key string, v Raw, def string) []byte {
	dst = append(dst, key...)
	if len(v) == 0 {
		return append(dst, def...)
	}
	return appendRaw(dst, v, respEsc)
}

// readUsage reads a chat usage object; members it does not know, or of another type, are
// left zero (usage is reported, never refused).
func readUsage(raw []byte) (respUsage, bool) {
	var u respUsage
	s := jsonwire.NewScanner(raw, jsonwire.Options{})
	if s.EnterObject() != nil {
		return u, false
	}
	num := func(dst *int64) {
		t, err := s.ReadValue()
		if err == nil && t.Integer() {
			*dst, _ = strconv.ParseInt(string(t.Raw(raw)), 10, 64)
		}
	}
	detail := func(name string, dst *int64) {
		if s.Peek() != '{' {
			_, _ = s.ReadValue()
			return
		}
		_ = s.EnterObject()
		for {
			key, more, err := s.NextMember()
			if err != nil || !more {
				return
			}
			if memberIs(raw, key, name) {
				num(dst)
			} else {
				_, _ = s.ReadValue()
			}
		}
	}
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return respUsage{}, false
		}
		if !more {
			break
		}
		switch keyName(raw, key) {
		case "prompt_tokens":
			num(&u.input)
		case "completion_tokens":
			num(&u.output)
		case "total_tokens":
			num(&u.total)
		case "prompt_tokens_details":
			detail("cached_tokens", &u.cached)
		case "completion_tokens_details":
			detail("reasoning_tokens", &u.reasoning)
		default:
			_, _ = s.ReadValue()
		}
	}
	if s.Finish() != nil {
		return respUsage{}, false
	}
	return u, true
}

// chatAnswer is the part of a whole chat completion a Response is made of.
type chatAnswer struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content          *string    `json:"content"`
			Refusal          *string    `json:"refusal"`
			ReasoningContent *string    `json:"reasoning_content"`
			Reasoning        *string    `json:"reasoning"`
			ToolCalls        []ToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// ChunkOfCompletion is a whole chat completion as the one stream chunk that says the same: its
// first choice's message as a delta (reasoning, content, tool calls), its finish reason and
// usage. A stream whose answer came whole (the response cache's) goes through ResponsesStream
// with it.
func ChunkOfCompletion(chat []byte) ([]byte, error) {
	var a chatAnswer
	if err := json.Unmarshal(chat, &a); err != nil {
		return nil, fmt.Errorf("openaiwire: reading a chat answer as a chunk: %w", err)
	}
	if len(a.Choices) == 0 {
		return nil, errors.New("openaiwire: reading a chat answer as a chunk: it has no choice")
	}
	c := &a.Choices[0]
	for i := range a.Choices {
		if a.Choices[i].Index == 0 {
			c = &a.Choices[i]
			break
		}
	}
	m := &c.Message
	d := Delta{Role: "assistant", Content: m.Content, ReasoningContent: m.ReasoningContent}
	if d.ReasoningContent == nil {
		d.ReasoningContent = m.Reasoning
	}
	for i, tc := range m.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, ToolCallDelta{Index: i, ID: tc.ID, Type: tc.Type, Function: tc.Function})
	}
	chunk := Chunk{Header: Header{Object: "chat.completion.chunk"}, Choices: []ChunkChoice{{Delta: &d, FinishReason: c.FinishReason}}}
	if len(a.Usage) > 0 && string(a.Usage) != "null" {
		chunk.Usage = &Usage{Raw: Raw(a.Usage)}
	}
	return chunk.AppendJSON(make([]byte, 0, len(chat)+64), Options{}), nil
}

// ChatToResponse translates a whole chat completion into a Response object for meta: a
// reasoning item (from vLLM's reasoning, or the older reasoning_content), a message (unless
// the answer is tool calls and its text only white space), then a function_call item per tool
// call; the status and incomplete_details from the finish reason, the usage renamed. Only the
// first choice is read (a Responses request has no n). encoding/json reads the answer: this
// runs once per answer, not per token.
func ChatToResponse(chat []byte, meta ResponsesMeta) ([]byte, error) {
	var a chatAnswer
	if err := json.Unmarshal(chat, &a); err != nil {
		return nil, fmt.Errorf("openaiwire: reading the chat answer for a Response: %w", err)
	}
	if len(a.Choices) == 0 {
		return nil, errors.New("openaiwire: reading the chat answer for a Response: it has no choice")
	}
	c := &a.Choices[0]
	for i := range a.Choices {
		if a.Choices[i].Index == 0 {
			c = &a.Choices[i]
			break
		}
	}
	r := respView{meta: &meta, ids: newItemIDs(meta.ID)}
	msg := &c.Message
	reasoning := msg.Reasoning
	if reasoning == nil {
		reasoning = msg.ReasoningContent
	}
	if reasoning != nil && *reasoning != "" {
		r.items = append(r.items, outItem{kind: kindReasoning, text: []byte(*reasoning)})
	}
	var content string
	if msg.Content != nil {
		content = *msg.Content
	}
	if !blank(content) || msg.Refusal != nil || len(msg.ToolCalls) == 0 {
		r.items = append(r.items, outItem{kind: kindMessage, text: []byte(content), refusal: msg.Refusal})
	}
	for _, tc := range msg.ToolCalls {
		id := callIDFor(r.items, tc.ID, r.ids.suffix, len(r.items))
		r.items = append(r.items, outItem{kind: kindCall, callID: id, name: tc.Function.Name, text: []byte(tc.Function.Arguments)})
	}
	reason := ""
	if c.FinishReason != nil {
		reason = *c.FinishReason
	}
	r.status, r.incomplete = finishStatus(reason)
	if r.status != "completed" && len(r.items) > 0 {
		r.items[len(r.items)-1].incomplete = true
	}
	if r.status == "failed" {
		r.errMsg = "The upstream model failed while answering."
	}
	if u, ok := readUsage(a.Usage); ok {
		r.usage = &u
	}
	return appendResponse(make([]byte, 0, 512+len(chat)), &r), nil
}

// EmptyResponse is a Response for meta without output: queued or in_progress (a background
// response before its answer), cancelled, or failed with errMsg.
func EmptyResponse(meta ResponsesMeta, status, errMsg string) []byte {
	return appendResponse(make([]byte, 0, 512), &respView{meta: &meta, ids: newItemIDs(meta.ID), status: status, errMsg: errMsg})
}

// blank reports whether s is empty or white space only: the whitespace some models write
// before a tool call, which must not become a message of its own.
func blank[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// ResponsesStream translates a chat completion stream into the Responses event stream, one
// chunk at a time: response.created and response.in_progress, then per output item
// output_item.added, content_part.added (text and reasoning), the deltas, their done events,
// content_part.done and output_item.done, and a terminal response.completed, .incomplete or
// .failed whose response carries the whole output. It holds one open item at a time; output
// and content indices are gap-free and the item ids are the same in every event. Events are
// appended as SSE ("event: <type>\ndata: <json>\n\n"), with sequence_numbers from 0. A
// ResponsesStream is for one stream and one goroutine.
//
// Text after a tool call becomes a new message item after it (the order the stream gave);
// white space before a tool call is held back and dropped, as vLLM does, so that it does not
// become a message of its own.
type ResponsesStream struct {
	view    respView
	meta    ResponsesMeta
	seq     int64
	open    int // index of the open item in view.items; -1 when none
	calls   []streamCall
	ws      []byte // white space held back, not yet a message
	started bool
	ended   bool
	reason  string
	finish  bool   // a finish_reason came
	failMsg string // an error event came
	usage   respUsage
}

// streamCall maps a chat tool_calls[].index to its item.
type streamCall struct{ index, item int }

// NewResponsesStream returns a translator for the Response meta describes (ID set).
func NewResponsesStream(meta ResponsesMeta) *ResponsesStream {
	s := &ResponsesStream{meta: meta, open: -1}
	s.view = respView{meta: &s.meta, ids: newItemIDs(meta.ID), status: "in_progress"}
	return s
}

// Start appends response.created and response.in_progress, once: the caller sends them when
// the upstream has answered 200, so that an upstream's 4xx still becomes a JSON error. Chunk
// and Finish start the stream themselves if the caller has not.
func (s *ResponsesStream) Start(dst []byte) []byte {
	if s.started {
		return dst
	}
	s.started = true
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		dst = s.event(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = appendResponse(dst, &s.view)
		dst = endEvent(dst)
	}
	return dst
}

// event opens an event: its SSE lines and its JSON up to sequence_number.
func (s *ResponsesStream) event(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, s.seq, 10)
	s.seq++
	return dst
}

func endEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// itemEvent opens an event about item i: item_id and output_index.
func (s *ResponsesStream) itemEvent(dst []byte, typ string, i int) []byte {
	dst = s.event(dst, typ)
	dst = append(dst, `,"item_id":`...)
	dst = s.view.ids.appendID(dst, s.view.items[i].kind, i)
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// Chunk appends the events for one chunk: data is an SSE data payload of the chat stream. A
// chunk that cannot be read, or an error event of the upstream, is an error and changes
// nothing else; the caller then ends the stream with Finish(dst, err), which emits
// response.failed. "[DONE]" marks the upstream's normal end.
func (s *ResponsesStream) Chunk(dst, data []byte) ([]byte, error) {
	if s.ended {
		return dst, nil
	}
	if string(trimSpace(data)) == "[DONE]" {
		return dst, nil // the end is Finish's, and needs a finish_reason seen
	}
	c, err := DecodeChunk(data)
	if err != nil {
		return dst, fmt.Errorf("openaiwire: responses stream: reading a chunk: %w", err)
	}
	if len(c.Choices) == 0 && c.Usage == nil {
		if msg, ok := upstreamError(data); ok {
			s.failMsg = msg
			return dst, fmt.Errorf("openaiwire: responses stream: the upstream sent an error: %s", msg)
		}
	}
	dst = s.Start(dst)
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue // a Responses request has one choice
		}
		if d := ch.Delta; d != nil {
			if d.ReasoningContent != nil && *d.ReasoningContent != "" {
				dst = s.reasoning(dst, *d.ReasoningContent)
			}
			if d.Content != nil && *d.Content != "" {
				dst = s.content(dst, *d.Content)
			}
			for j := range d.ToolCalls {
				dst = s.toolCall(dst, &d.ToolCalls[j])
			}
		}
		if ch.FinishReason != nil {
			s.reason, s.finish = *ch.FinishReason, true
		}
	}
	if c.Usage != nil {
		if u, ok := readUsage(c.Usage.Raw); ok {
			s.usage, s.view.usage = u, &s.usage
		}
	}
	return dst, nil
}

func trimSpace(b []byte) []byte {
	b = trimLeft(b)
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// upstreamError is the message of an error event ({"error":{"message":…}}), if data is one.
func upstreamError(data []byte) (string, bool) {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == nil {
		return "", false
	}
	if e.Error.Message == "" {
		return "the upstream failed", true
	}
	return e.Error.Message, true
}

// openItem closes the open item, appends a new one and announces it.
func (s *ResponsesStream) openItem(dst []byte, it outItem) []byte {
	dst = s.closeItem(dst, false)
	s.view.items = append(s.view.items, it)
	i := len(s.view.items) - 1
	s.open = i
	dst = s.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, s.view.ids, i, &s.view.items[i], true)
	dst = endEvent(dst)
	switch it.kind {
	case kindMessage:
		dst = s.itemEvent(dst, "response.content_part.added", i)
		dst = append(dst, `,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`...)
		dst = endEvent(dst)
	case kindReasoning:
		dst = s.itemEvent(dst, "response.content_part.added", i)
		dst = append(dst, `,"content_index":0,"part":{"type":"reasoning_text","text":""}`...)
		dst = endEvent(dst)
	}
	return dst
}

// closeItem emits the done events of the open item, if any.
func (s *ResponsesStream) closeItem(dst []byte, incomplete bool) []byte {
	i := s.open
	if i < 0 {
		return dst
	}
	s.open = -1
	it := &s.view.items[i]
	it.incomplete = incomplete
	switch it.kind {
	case kindMessage, kindReasoning:
		typ, part := "response.output_text.done", appendTextPart
		if it.kind == kindReasoning {
			typ, part = "response.reasoning_text.done", appendReasoningPart
		}
		dst = s.itemEvent(dst, typ, i)
		dst = append(dst, `,"content_index":0,"text":`...)
		dst = jsonwire.AppendString(dst, it.text, respEsc)
		if it.kind == kindMessage {
			dst = append(dst, `,"logprobs":[]`...)
		}
		dst = endEvent(dst)
		dst = s.itemEvent(dst, "response.content_part.done", i)
		dst = append(dst, `,"content_index":0,"part":`...)
		dst = part(dst, it.text)
		dst = endEvent(dst)
	case kindCall:
		dst = s.itemEvent(dst, "response.function_call_arguments.done", i)
		dst = append(dst, `,"name":`...)
		dst = jsonwire.AppendString(dst, it.name, respEsc)
		dst = append(dst, `,"arguments":`...)
		dst = jsonwire.AppendString(dst, it.text, respEsc)
		dst = endEvent(dst)
	}
	dst = s.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = appendItem(dst, s.view.ids, i, it, false)
	return endEvent(dst)
}

func (s *ResponsesStream) openKind() uint8 {
	if s.open < 0 {
		return 0
	}
	return s.view.items[s.open].kind
}

func (s *ResponsesStream) reasoning(dst []byte, text string) []byte {
	if s.openKind() != kindReasoning {
		dst = s.openItem(dst, outItem{kind: kindReasoning})
	}
	it := &s.view.items[s.open]
	it.text = append(it.text, text...)
	dst = s.itemEvent(dst, "response.reasoning_text.delta", s.open)
	dst = append(dst, `,"content_index":0,"delta":`...)
	dst = jsonwire.AppendString(dst, text, respEsc)
	return endEvent(dst)
}

func (s *ResponsesStream) content(dst []byte, text string) []byte {
	if s.openKind() != kindMessage {
		if blank(text) {
			s.ws = append(s.ws, text...)
			return dst
		}
		dst = s.openItem(dst, outItem{kind: kindMessage})
	}
	it := &s.view.items[s.open]
	dst = s.itemEvent(dst, "response.output_text.delta", s.open)
	dst = append(dst, `,"content_index":0,"delta":"`...)
	if len(s.ws) > 0 {
		// The held-back white space turned out to lead text: it goes first, in this delta.
		it.text = append(it.text, s.ws...)
		dst = jsonwire.AppendContents(dst, s.ws, respEsc)
		s.ws = s.ws[:0]
	}
	it.text = append(it.text, text...)
	dst = jsonwire.AppendContents(dst, text, respEsc)
	dst = append(dst, `","logprobs":[]`...)
	return endEvent(dst)
}

func (s *ResponsesStream) toolCall(dst []byte, tc *ToolCallDelta) []byte {
	s.ws = s.ws[:0] // white space before a call is noise
	item := -1
	for _, c := range s.calls {
		if c.index == tc.Index {
			item = c.item
		}
	}
	// A fragment with an id other than its index's call's is a new call (some servers reuse
	// an index).
	if item < 0 || (tc.ID != "" && tc.ID != s.view.items[item].callID && s.view.items[item].callID != "") {
		i := len(s.view.items)
		id := callIDFor(s.view.items, tc.ID, s.view.ids.suffix, i)
		dst = s.openItem(dst, outItem{kind: kindCall, callID: id, name: tc.Function.Name})
		s.calls = append(s.calls, streamCall{index: tc.Index, item: i})
		item = i
	}
	it := &s.view.items[item]
	if it.name == "" {
		it.name = tc.Function.Name
	}
	if tc.Function.Arguments == "" {
		return dst
	}
	it.text = append(it.text, tc.Function.Arguments...)
	if item != s.open {
		// A late fragment of a call already closed (interleaved parallel calls): its events
		// are out, so the arguments go only into the final output, which is what the Agents
		// SDK runs.
		return dst
	}
	dst = s.itemEvent(dst, "response.function_call_arguments.delta", item)
	dst = append(dst, `,"delta":`...)
	dst = jsonwire.AppendString(dst, tc.Function.Arguments, respEsc)
	return endEvent(dst)
}

// SetCompletedAt sets the completed_at the final Response carries (unix seconds): the time the
// answer ended, which the caller knows only then.
func (s *ResponsesStream) SetCompletedAt(unix int64) { s.meta.CompletedAt = unix }

// Finish ends the stream: it closes the open item and appends the terminal event. err is why
// the upstream stream stopped, nil when it ended by itself. The Response is response.completed
// (or .incomplete, for a length or content_filter finish) when the upstream finished a choice
// and sent no error; otherwise response.failed, its open item incomplete. response is the
// final Response, also in the terminal event: the caller stores it before writing the events,
// so that a follow-up on another replica finds it. A second call appends nothing and returns
// the same response.
func (s *ResponsesStream) Finish(dst []byte, err error) (events, response []byte) {
	if s.ended {
		return dst, appendResponse(nil, &s.view)
	}
	dst = s.Start(dst)
	s.ended = true
	v := &s.view
	switch {
	case err != nil:
		v.status, v.errMsg = "failed", "The upstream stream failed: "+err.Error()
	case s.failMsg != "":
		v.status, v.errMsg = "failed", "The upstream failed: "+s.failMsg
	case !s.finish:
		v.status, v.errMsg = "failed", "The upstream stream ended before the answer was finished."
	default:
		v.status, v.incomplete = finishStatus(s.reason)
		if v.status == "cancelled" || v.status == "failed" {
			// No SDK knows a response.cancelled event: an aborted answer is a failed one.
			v.status, v.errMsg = "failed", "The upstream stopped the answer ("+s.reason+")."
		}
	}
	if v.status != "failed" && !s.hasMessageOrCall() {
		// An answer of white space, or of nothing, is still a message (as ChatToResponse
		// makes it), so that output_text is there.
		dst = s.openItem(dst, outItem{kind: kindMessage})
		if len(s.ws) > 0 {
			dst = s.content(dst, "")
		}
	}
	dst = s.closeItem(dst, v.status != "completed")
	typ := "response." + v.status
	response = appendResponse(make([]byte, 0, 512), v)
	dst = s.event(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = append(dst, response...)
	return endEvent(dst), response
}

func (s *ResponsesStream) hasMessageOrCall() bool {
	for i := range s.view.items {
		if s.view.items[i].kind != kindReasoning {
			return true
		}
	}
	return false
}
