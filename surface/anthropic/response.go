package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/core/httpapi"
)

// outBlock is one content block of an answer.
type outBlock struct {
	typ   string // text, thinking, tool_use
	text  []byte // text, thinking: the upstream's JSON string literal, copied as is
	id    string // tool_use
	name  string
	input []byte // a JSON object
}

// usage is an answer's usage, in Anthropic's terms.
type usage struct {
	input, output, cacheRead int64
}

// fromOpenAI is usage from OpenAI's counts: Anthropic's input_tokens leaves out the prompt tokens
// read from a cache, which it counts apart.
func fromOpenAI(prompt, completion, cached int64) usage {
	if cached < 0 || cached > prompt {
		cached = 0
	}
	return usage{input: prompt - cached, output: completion, cacheRead: cached}
}

func appendUsage(b []byte, u usage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = appendInt(b, u.input)
	b = append(b, `,"output_tokens":`...)
	b = appendInt(b, u.output)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":`...)
	b = appendInt(b, u.cacheRead)
	return append(b, '}')
}

// message is an Anthropic message translated from an OpenAI completion.
type message struct {
	content      []outBlock
	stopReason   string
	stopSequence string // "" is null
	usage        usage
}

// stopReason maps OpenAI's finish_reason to Anthropic's stop_reason, as LiteLLM, Olla and vLLM
// do: stop is end_turn (stop_sequence when vLLM names the stop string that matched), length is
// max_tokens, tool_calls is tool_use, content_filter is refusal. An answer with tool calls is
// tool_use whatever its finish_reason says (some servers say stop): the client's tool loop keys
// on it. vllmStop is vLLM's stop_reason, raw.
func stopReason(finish string, vllmStop []byte, tools, refused bool) (reason, sequence string) {
	switch {
	case tools && (finish == "stop" || finish == "tool_calls" || finish == "function_call" || finish == ""):
		return "tool_use", ""
	case finish == "length":
		return "max_tokens", ""
	case finish == "tool_calls", finish == "function_call":
		return "tool_use", ""
	case finish == "content_filter", refused:
		return "refusal", ""
	case finish == "stop" && len(vllmStop) > 0 && vllmStop[0] == '"':
		var s string
		if json.Unmarshal(vllmStop, &s) == nil && s != "" {
			return "stop_sequence", s
		}
	}
	return "end_turn", ""
}

// decodeCompletion reads an OpenAI chat completion as an Anthropic message, with the scanner
// (the answer's text is copied out as the JSON string literal it is). Its error is the
// upstream's fault: a 502, or the error a 200 answer held instead of a completion.
func decodeCompletion(body []byte) (*message, *apiError) {
	if obj, status, ok := httpapi.ParseEvent(body); ok {
		msg := obj.Message
		if msg == "" {
			msg = "The upstream answered with an error."
		}
		return nil, &apiError{status: status, typ: errorType(status), msg: msg}
	}
	var (
		text, thinking, refusal []byte
		calls                   []outBlock
		finish, vllmStop        []byte
		u                       usage
		choices                 int
		badArgs                 string
	)
	sc := newScanner(body)
	if sc.Peek() != '{' {
		return nil, badUpstream("The upstream's answer is not a chat completion: " + httpapi.Truncate(string(body), 200))
	}
	sc.enterObject()
	for key, ok := sc.member(); ok; key, ok = sc.member() {
		switch string(key) {
		case `"choices"`:
			if !sc.enterArray() {
				break
			}
			for sc.element() {
				if choices++; choices > 1 { // n > 1 is never asked for: the first choice is the answer
					sc.skip()
					continue
				}
				if !sc.enterObject() {
					continue
				}
				for key, ok := sc.member(); ok; key, ok = sc.member() {
					switch string(key) {
					case `"message"`:
						if !sc.enterObject() {
							break
						}
						for key, ok := sc.member(); ok; key, ok = sc.member() {
							switch string(key) {
							case `"content"`:
								text = sc.strOrNull()
							case `"reasoning_content"`, `"reasoning"`:
								if r := sc.strOrNull(); len(r) > len(thinking) {
									thinking = r
								}
							case `"refusal"`:
								refusal = sc.strOrNull()
							case `"tool_calls"`:
								if !sc.enterArray() {
									break
								}
								for i := 0; sc.element(); i++ {
									tc, ok := toolCallOf(&sc, i)
									if !ok {
										break
									}
									if tc.input == nil && badArgs == "" {
										badArgs = fmt.Sprintf("The upstream's tool call %d (%s) has arguments that are not a JSON object.", i, tc.name)
									}
									calls = append(calls, tc)
								}
							default:
								sc.skip()
							}
						}
					case `"finish_reason"`:
						finish = sc.strOrNull()
					case `"stop_reason"`:
						vllmStop = sc.raw()
					default:
						sc.skip()
					}
				}
			}
		case `"usage"`:
			u, _, _ = readUsage(&sc)
		default:
			sc.skip()
		}
	}
	switch {
	case sc.bad() || !sc.end():
		return nil, badUpstream("The upstream's answer is not a chat completion: " + httpapi.Truncate(string(body), 200))
	case choices == 0:
		return nil, badUpstream("The upstream's chat completion has no choices.")
	case badArgs != "":
		return nil, badUpstream(badArgs)
	}
	m := &message{content: make([]outBlock, 0, 2+len(calls))}
	if len(thinking) > 2 {
		m.content = append(m.content, outBlock{typ: "thinking", text: thinking})
	}
	if len(text) > 2 {
		m.content = append(m.content, outBlock{typ: "text", text: text})
	}
	if len(refusal) > 2 {
		m.content = append(m.content, outBlock{typ: "text", text: refusal})
	}
	m.content = append(m.content, calls...)
	f := ""
	if len(finish) > 2 {
		f = unquote(finish)
	}
	m.stopReason, m.stopSequence = stopReason(f, vllmStop, len(calls) > 0, len(refusal) > 2)
	m.usage = u
	return m, nil
}

// readUsage reads an OpenAI usage object (a whole answer's, or a stream's last chunk's); seen is
// whether it had any field; ok is false when the JSON is malformed.
func readUsage(sc *scanner) (u usage, seen, ok bool) {
	var prompt, completion, cached int64
	if sc.enterObject() {
		for key, more := sc.member(); more; key, more = sc.member() {
			seen = true
			switch string(key) {
			case `"prompt_tokens"`:
				prompt = sc.int()
			case `"completion_tokens"`:
				completion = sc.int()
			case `"prompt_tokens_details"`:
				if !sc.enterObject() {
					break
				}
				for key, more := sc.member(); more; key, more = sc.member() {
					if string(key) == `"cached_tokens"` {
						cached = sc.int()
					} else {
						sc.skip()
					}
				}
			default:
				sc.skip()
			}
		}
	}
	return fromOpenAI(prompt, completion, cached), seen, !sc.bad()
}

// toolCallOf reads one of a completion's tool calls; its input is nil when the arguments are not
// a JSON object. ok is false when the JSON is malformed.
func toolCallOf(sc *scanner, i int) (outBlock, bool) {
	f, ok := readToolCall(sc, int64(i))
	id, name, args := f.id, f.name, f.args
	if !ok {
		return outBlock{}, false
	}
	tc := outBlock{typ: "tool_use", id: "toolu_" + strconv.Itoa(i)}
	if len(id) > 2 {
		tc.id = unquote(id)
	}
	if name != nil {
		tc.name = unquote(name)
	}
	tc.input = []byte("{}")
	if args != nil {
		if a := bytes.TrimSpace([]byte(unquote(args))); len(a) > 0 {
			// One object and nothing else: a NUL byte after it is not the end (arguments written
			// as they are into the message must be JSON).
			as := newScanner(a)
			if as.Peek() != '{' || !as.skip() || as.Finish() != nil {
				tc.input = nil
			} else {
				tc.input = a
			}
		}
	}
	return tc, true
}

func badUpstream(msg string) *apiError {
	return &apiError{status: http.StatusBadGateway, typ: "api_error", msg: msg}
}

// appendMessage writes m as Anthropic's message object.
func appendMessage(b []byte, id, model string, m *message) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, model)
	b = append(b, `,"content":[`...)
	for i := range m.content {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendBlock(b, &m.content[i], false)
	}
	b = append(b, `],"stop_reason":`...)
	b = appendString(b, m.stopReason)
	b = append(b, `,"stop_sequence":`...)
	b = appendNullable(b, m.stopSequence)
	b = append(b, `,"usage":`...)
	b = appendUsage(b, m.usage)
	return append(b, '}')
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

// appendBlock writes a content block, whole, or empty as a stream's content_block_start has it.
func appendBlock(b []byte, bl *outBlock, start bool) []byte {
	switch bl.typ {
	case "thinking":
		b = append(b, `{"type":"thinking","thinking":`...)
		if start {
			b = append(b, `""`...)
		} else {
			b = append(b, bl.text...)
		}
		// No signature: the upstream's reasoning is not Anthropic's, and nothing can verify it.
		return append(b, `,"signature":""}`...)
	case "tool_use":
		b = append(b, `{"type":"tool_use","id":`...)
		b = appendString(b, bl.id)
		b = append(b, `,"name":`...)
		b = appendString(b, bl.name)
		b = append(b, `,"input":`...)
		if start {
			b = append(b, "{}"...)
		} else {
			b = append(b, bl.input...)
		}
		return append(b, '}')
	}
	b = append(b, `{"type":"text","text":`...)
	if start {
		b = append(b, `""`...)
	} else {
		b = append(b, bl.text...)
	}
	return append(b, '}')
}

// appendMessageEvents writes m as the event stream Anthropic would have sent for it: for a
// client that asked for a stream when the answer came whole (a response cache's, say).
func appendMessageEvents(b []byte, id, model string, m *message, estimate int) []byte {
	b = appendMessageStart(b, id, model, estimate)
	for i := range m.content {
		bl := &m.content[i]
		b = appendEventHead(b, "content_block_start")
		b = append(b, `{"type":"content_block_start","index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"content_block":`...)
		b = appendBlock(b, bl, true)
		b = append(b, "}\n\n"...)
		b = appendEventHead(b, "content_block_delta")
		b = append(b, `{"type":"content_block_delta","index":`...)
		b = appendInt(b, int64(i))
		switch bl.typ {
		case "thinking":
			b = append(b, `,"delta":{"type":"thinking_delta","thinking":`...)
			b = append(b, bl.text...)
		case "tool_use":
			b = append(b, `,"delta":{"type":"input_json_delta","partial_json":`...)
			b = appendString(b, string(bl.input))
		default:
			b = append(b, `,"delta":{"type":"text_delta","text":`...)
			b = append(b, bl.text...)
		}
		b = append(b, "}}\n\n"...)
		b = appendBlockStop(b, i)
	}
	return appendMessageEnd(b, m.stopReason, m.stopSequence, m.usage)
}

func appendEventHead(b []byte, name string) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	return append(b, "\ndata: "...)
}

// appendMessageStart writes message_start, its usage the prompt's estimate (the upstream counts
// it only at the end; clients such as Claude Code misbehave on zeros), then a ping.
func appendMessageStart(b []byte, id, model string, estimate int) []byte {
	b = appendEventHead(b, "message_start")
	b = append(b, `{"type":"message_start","message":{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = appendString(b, model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	b = appendUsage(b, usage{input: int64(estimate)})
	b = append(b, "}}\n\n"...)
	return append(b, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
}

func appendBlockStop(b []byte, index int) []byte {
	b = appendEventHead(b, "content_block_stop")
	b = append(b, `{"type":"content_block_stop","index":`...)
	b = appendInt(b, int64(index))
	return append(b, "}\n\n"...)
}

func appendMessageEnd(b []byte, reason, sequence string, u usage) []byte {
	b = appendEventHead(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":{"stop_reason":`...)
	b = appendString(b, reason)
	b = append(b, `,"stop_sequence":`...)
	b = appendNullable(b, sequence)
	b = append(b, `},"usage":`...)
	b = appendUsage(b, u)
	b = append(b, "}\n\n"...)
	return append(b, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}

func appendErrorEvent(b []byte, typ, msg string) []byte {
	b = appendEventHead(b, "error")
	b = appendError(b, typ, msg, "")
	return append(b, "\n\n"...)
}

// toolCallFields are one OpenAI tool call's fields as raw JSON values (strings still quoted;
// nil when absent or null), a whole answer's or a stream delta's.
type toolCallFields struct {
	index          int64
	id, name, args []byte
}

// readToolCall reads a tool call object; index is pos unless the object has its own. ok is
// false when the JSON is malformed.
func readToolCall(sc *scanner, pos int64) (toolCallFields, bool) {
	f := toolCallFields{index: pos}
	if sc.enterObject() {
		for key, ok := sc.member(); ok; key, ok = sc.member() {
			switch string(key) {
			case `"index"`:
				f.index = sc.int()
			case `"id"`:
				f.id = sc.strOrNull()
			case `"function"`:
				if !sc.enterObject() {
					break
				}
				for key, ok := sc.member(); ok; key, ok = sc.member() {
					switch string(key) {
					case `"name"`:
						f.name = sc.strOrNull()
					case `"arguments"`:
						f.args = sc.strOrNull()
					default:
						sc.skip()
					}
				}
			default:
				sc.skip()
			}
		}
	}
	return f, !sc.bad()
}
