package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// chatCompletion is the part of an OpenAI chat completion an Anthropic message is made of.
type chatCompletion struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
			Refusal          *string `json:"refusal"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
		// StopReason is vLLM's: the stop string that ended the answer (or a stop token's id).
		StopReason json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// outBlock is one content block of an answer.
type outBlock struct {
	typ   string // text, thinking, tool_use
	text  string // text, thinking
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

// decodeCompletion reads an OpenAI chat completion as an Anthropic message. Its error is the
// upstream's fault: a 502.
func decodeCompletion(body []byte) (*message, *apiError) {
	var c chatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, badUpstream(fmt.Sprintf("The upstream's answer is not a chat completion: %v", err))
	}
	if len(c.Choices) == 0 {
		return nil, badUpstream("The upstream's chat completion has no choices.")
	}
	ch := &c.Choices[0]
	m := &message{}
	if r := ch.Message.ReasoningContent; r != nil && *r != "" {
		m.content = append(m.content, outBlock{typ: "thinking", text: *r})
	} else if r := ch.Message.Reasoning; r != nil && *r != "" {
		m.content = append(m.content, outBlock{typ: "thinking", text: *r})
	}
	if s := ch.Message.Content; s != nil && *s != "" {
		m.content = append(m.content, outBlock{typ: "text", text: *s})
	}
	refused := false
	if s := ch.Message.Refusal; s != nil && *s != "" {
		m.content = append(m.content, outBlock{typ: "text", text: *s})
		refused = true
	}
	for i, tc := range ch.Message.ToolCalls {
		input := []byte("{}")
		if a := bytes.TrimSpace([]byte(tc.Function.Arguments)); len(a) > 0 {
			if a[0] != '{' || !json.Valid(a) {
				return nil, badUpstream(fmt.Sprintf("The upstream's tool call %d (%s) has arguments that are not a JSON object.", i, tc.Function.Name))
			}
			input = a
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("toolu_%d", i)
		}
		m.content = append(m.content, outBlock{typ: "tool_use", id: id, name: tc.Function.Name, input: input})
	}
	finish := ""
	if ch.FinishReason != nil {
		finish = *ch.FinishReason
	}
	m.stopReason, m.stopSequence = stopReason(finish, ch.StopReason, len(ch.Message.ToolCalls) > 0, refused)
	if u := c.Usage; u != nil {
		cached := int64(0)
		if u.PromptTokensDetails != nil {
			cached = u.PromptTokensDetails.CachedTokens
		}
		m.usage = fromOpenAI(u.PromptTokens, u.CompletionTokens, cached)
	}
	return m, nil
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
			b = appendString(b, bl.text)
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
		b = appendString(b, bl.text)
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
			b = appendString(b, bl.text)
		case "tool_use":
			b = append(b, `,"delta":{"type":"input_json_delta","partial_json":`...)
			b = appendString(b, string(bl.input))
		default:
			b = append(b, `,"delta":{"type":"text_delta","text":`...)
			b = appendString(b, bl.text)
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
