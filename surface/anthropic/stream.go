package anthropic

import (
	"errors"
	"fmt"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// Bounds of the stream translator: whatever an upstream sends, it holds at most one event of
// maxEvent bytes, maxPending bytes of tool arguments that came before their tool's name, and
// maxToolCalls tool calls' state.
const (
	maxEvent     = 4 << 20
	maxPending   = 1 << 20
	maxToolCalls = 256
)

// Block kinds.
const (
	kindNone = iota
	kindText
	kindThinking
	kindTool
)

// streamer turns an OpenAI chat completion stream, event by event, into Anthropic's event
// sequence: message_start and ping at once; one content block open at a time (thinking, text or
// tool_use, in the order the upstream sends them; opening one closes the last); message_delta
// with the stop reason and the usage, and message_stop, at the end; or an error event, after
// which nothing more is sent. Output accumulates in out for the caller to send.
type streamer struct {
	out      []byte
	id       string
	model    string
	estimate int

	open   int // the open block's kind
	index  int // the open block's index; the next block's is index+1 (or 0)
	blocks int // blocks started

	tools []toolState
	// the answer's end
	finish   string
	vllmStop []byte
	refused  bool
	usage    usage
	hasUsage bool
	deltas   int64 // content events, the output's size when the upstream reports no usage

	tap    *pipeline.EventTap
	failed bool
	ended  bool
}

type toolState struct {
	oai     int64  // the upstream's index of the call
	block   int    // its block index; -1 until started
	id      []byte // raw string literals
	name    []byte
	pending [][]byte // raw argument fragments that came before the name
	size    int
}

func newStreamer(id, model string, estimate int) *streamer {
	s := &streamer{id: id, model: model, estimate: estimate, index: -1}
	s.tap = pipeline.NewEventTap(maxEvent, s.event)
	return s
}

// start writes message_start and a ping.
func (s *streamer) start() { s.out = appendMessageStart(s.out, s.id, s.model, s.estimate) }

// write takes the upstream stream's next bytes.
func (s *streamer) write(p []byte) {
	if s.failed || s.ended {
		return
	}
	s.tap.Write(p)
	s.tapFailed()
}

func (s *streamer) tapFailed() {
	switch err := s.tap.Err(); {
	case err == nil, s.failed:
	case errors.Is(err, pipeline.ErrEventTooLarge):
		s.fail("api_error", fmt.Sprintf("The upstream sent a streamed event over %d bytes.", maxEvent))
	case errors.Is(err, pipeline.ErrErrorEvent):
		s.fail("api_error", "The upstream failed mid-stream.")
	case errors.Is(err, pipeline.ErrAfterDone):
		// Nothing counts after [DONE]; the answer is complete.
	default:
		s.fail("api_error", err.Error())
	}
}

// fail ends the stream with an error event.
func (s *streamer) fail(typ, msg string) {
	if s.failed || s.ended {
		return
	}
	s.failed = true
	s.out = appendErrorEvent(s.out, typ, msg)
}

var errStop = errors.New("stream ended")

// event handles one event's data: a chunk.
func (s *streamer) event(data []byte) error {
	if s.failed {
		return errStop
	}
	if obj, status, ok := httpapi.ParseEvent(data); ok {
		msg := obj.Message
		if msg == "" {
			msg = "The upstream failed mid-stream."
		}
		s.fail(errorType(status), msg)
		return errStop
	}
	if !s.chunk(data) {
		s.fail("api_error", "The upstream sent a malformed stream chunk: "+httpapi.Truncate(string(data), 200))
		return errStop
	}
	return nil
}

// delta is what one chunk's choice carries, raw string literals.
type delta struct {
	text, thinking, refusal []byte
	toolCalls               []byte // the raw array, walked after the text
}

// chunk handles one chunk; false when it is malformed.
func (s *streamer) chunk(data []byte) bool {
	sc0 := newScanner(data) // on the stack: the walks are loops, not callbacks
	sc := &sc0
	var d delta
	if sc.enterObject() {
		for key, ok := sc.member(); ok; key, ok = sc.member() {
			switch string(key) {
			case `"choices"`:
				if sc.enterArray() {
					for sc.element() {
						s.choice(sc, &d)
					}
				}
			case `"usage"`:
				s.readUsage(sc)
			default:
				sc.skip()
			}
		}
	}
	if sc.bad() || !sc.end() {
		return false
	}
	if len(d.thinking) > 2 {
		s.content(kindThinking, "thinking_delta", "thinking", d.thinking)
	}
	if len(d.text) > 2 {
		s.content(kindText, "text_delta", "text", d.text)
	}
	if len(d.refusal) > 2 {
		s.refused = true
		s.content(kindText, "text_delta", "text", d.refusal)
	}
	if d.toolCalls != nil {
		sc0 = newScanner(d.toolCalls) // the chunk is read: d holds slices of data, not of sc
		if sc.enterArray() {
			for i := 0; sc.element(); i++ {
				if !s.toolCall(sc, i) {
					return false
				}
			}
		}
		return !sc.bad()
	}
	return true
}

// choice reads one of a chunk's choices into d (a malformed one leaves sc bad).
func (s *streamer) choice(sc *scanner, d *delta) {
	if !sc.enterObject() {
		return
	}
	for key, ok := sc.member(); ok; key, ok = sc.member() {
		switch string(key) {
		case `"delta"`:
			if !sc.enterObject() {
				break
			}
			for key, ok := sc.member(); ok; key, ok = sc.member() {
				switch string(key) {
				case `"content"`:
					d.text = sc.strOrNull()
				case `"reasoning_content"`, `"reasoning"`:
					if r := sc.strOrNull(); len(r) > len(d.thinking) {
						d.thinking = r
					}
				case `"refusal"`:
					d.refusal = sc.strOrNull()
				case `"tool_calls"`:
					d.toolCalls = sc.raw()
				default:
					sc.skip()
				}
			}
		case `"finish_reason"`:
			if f := sc.strOrNull(); len(f) > 2 && string(f[1:len(f)-1]) != s.finish {
				s.finish = unquote(f)
			}
		case `"stop_reason"`:
			if v := sc.raw(); v != nil && v[0] == '"' {
				s.vllmStop = append(s.vllmStop[:0], v...)
			}
		default:
			sc.skip()
		}
	}
}

func (s *streamer) readUsage(sc *scanner) bool {
	u, seen, ok := readUsage(sc)
	if ok && seen {
		s.usage, s.hasUsage = u, true
	}
	return ok
}

// openBlock closes the open block and starts a new one of kind; head is its content_block.
func (s *streamer) openBlock(kind int, head func(b []byte) []byte) {
	s.closeBlock()
	s.index = s.blocks
	s.blocks++
	s.open = kind
	b := appendEventHead(s.out, "content_block_start")
	b = append(b, `{"type":"content_block_start","index":`...)
	b = appendInt(b, int64(s.index))
	b = append(b, `,"content_block":`...)
	b = head(b)
	s.out = append(b, "}\n\n"...)
}

func (s *streamer) closeBlock() {
	if s.open != kindNone {
		s.out = appendBlockStop(s.out, s.index)
		s.open = kindNone
	}
}

// content writes a text or thinking delta, opening its block if another kind is open.
func (s *streamer) content(kind int, deltaType, field string, raw []byte) {
	if s.open != kind {
		s.openBlock(kind, func(b []byte) []byte {
			if kind == kindThinking {
				return append(b, `{"type":"thinking","thinking":"","signature":""}`...)
			}
			return append(b, `{"type":"text","text":""}`...)
		})
	}
	s.deltaHead(deltaType, field)
	s.out = append(s.out, raw...)
	s.out = append(s.out, "}}\n\n"...)
	s.deltas++
}

func (s *streamer) deltaHead(deltaType, field string) {
	b := appendEventHead(s.out, "content_block_delta")
	b = append(b, `{"type":"content_block_delta","index":`...)
	b = appendInt(b, int64(s.index))
	b = append(b, `,"delta":{"type":"`...)
	b = append(b, deltaType...)
	b = append(b, `","`...)
	b = append(b, field...)
	s.out = append(b, `":`...)
}

// toolCall handles one element of a chunk's delta.tool_calls: the first with an id and a name
// starts the call's tool_use block; its argument fragments are input_json_delta events (those that
// came first wait for the start).
func (s *streamer) toolCall(sc *scanner, pos int) bool {
	f, ok := readToolCall(sc, int64(pos))
	idx, id, name, args := f.index, f.id, f.name, f.args
	if !ok {
		return false
	}
	t := s.tool(idx)
	if t == nil {
		s.fail("api_error", fmt.Sprintf("The upstream streamed more than %d tool calls.", maxToolCalls))
		return true
	}
	if len(id) > 2 && t.id == nil {
		t.id = append([]byte(nil), id...)
	}
	if len(name) > 2 && t.name == nil {
		t.name = append([]byte(nil), name...)
	}
	if t.block < 0 && t.name != nil {
		if t.id == nil {
			// Some servers never send an id: make one, stable for the call.
			t.id = fmt.Appendf(nil, `"toolu_%s_%d"`, s.id, t.oai)
		}
		s.openBlock(kindTool, func(b []byte) []byte {
			b = append(b, `{"type":"tool_use","id":`...)
			b = append(b, t.id...)
			b = append(b, `,"name":`...)
			b = append(b, t.name...)
			return append(b, `,"input":{}}`...)
		})
		t.block = s.index
		for _, p := range t.pending {
			s.argDelta(p)
		}
		t.pending, t.size = nil, 0
	}
	if len(args) <= 2 {
		return true
	}
	switch {
	case t.block < 0:
		if t.size += len(args); t.size > maxPending {
			s.fail("api_error", "The upstream streamed too many tool call arguments before the tool's name.")
			return true
		}
		t.pending = append(t.pending, append([]byte(nil), args...))
	case t.block == s.index && s.open == kindTool:
		s.argDelta(args)
	default:
		// Anthropic's blocks do not interleave; an upstream that goes back to a call it left
		// cannot be passed on in order.
		s.fail("api_error", "The upstream interleaved a tool call's arguments with later content.")
	}
	return true
}

func (s *streamer) argDelta(raw []byte) {
	s.deltaHead("input_json_delta", "partial_json")
	s.out = append(s.out, raw...)
	s.out = append(s.out, "}}\n\n"...)
	s.deltas++
}

// tool is the state of the upstream's tool call idx, made on first sight; nil past the bound.
func (s *streamer) tool(idx int64) *toolState {
	for i := range s.tools {
		if s.tools[i].oai == idx {
			return &s.tools[i]
		}
	}
	if len(s.tools) >= maxToolCalls {
		return nil
	}
	s.tools = append(s.tools, toolState{oai: idx, block: -1})
	return &s.tools[len(s.tools)-1]
}

// end finishes the sequence after the upstream's last byte: the open block's stop, message_delta
// and message_stop; or an error event when the stream did not end as a complete answer does.
func (s *streamer) end() {
	if s.failed || s.ended {
		return
	}
	s.tap.End()
	s.tapFailed()
	if s.failed {
		return
	}
	if !s.tap.Done() && s.finish == "" {
		s.fail("api_error", "The upstream's stream ended before the answer did.")
		return
	}
	for i := range s.tools {
		if s.tools[i].block < 0 {
			s.fail("api_error", "The upstream streamed a tool call without a name.")
			return
		}
	}
	s.closeBlock()
	u := s.usage
	if !s.hasUsage {
		u = usage{input: int64(s.estimate), output: s.deltas}
	}
	reason, seq := stopReason(s.finish, s.vllmStop, len(s.tools) > 0, s.refused)
	s.out = appendMessageEnd(s.out, reason, seq, u)
	s.ended = true
}
