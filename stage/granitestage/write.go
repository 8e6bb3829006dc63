package granitestage

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/granite"
)

// The stage writes its JSON by hand, byte for byte as encoding/json.Marshal writes the same
// values (TestWriteIsMarshal and FuzzDecodeCompletion hold it to that): reflection over a
// 4,000-character answer and its citations cost more than parsing them.

// appendAnswer appends a as json.Marshal(a) writes it.
func appendAnswer(dst []byte, a *chatAnswer) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, a.ID)
	dst = append(dst, `,"object":`...)
	dst = appendJSONString(dst, a.Object)
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, a.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, a.Model)
	dst = append(dst, `,"choices":`...)
	if a.Choices == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range a.Choices {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendChoice(dst, &a.Choices[i]); err != nil {
				return nil, err
			}
		}
		dst = append(dst, ']')
	}
	if u := a.Usage; u != nil {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, u.PromptTokens, 10)
		dst = append(dst, `,"completion_tokens":`...)
		dst = strconv.AppendInt(dst, u.CompletionTokens, 10)
		dst = append(dst, `,"total_tokens":`...)
		dst = strconv.AppendInt(dst, u.TotalTokens, 10)
		dst = append(dst, '}')
	}
	if len(a.SystemFingerprint) > 0 {
		dst = append(dst, `,"system_fingerprint":`...)
		var err error
		if dst, err = appendRaw(dst, a.SystemFingerprint); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// answerSize is about the length of a's JSON: its texts, an eighth more for escapes, and each
// object's member names and numbers.
func answerSize(a *chatAnswer) int {
	n := 256
	for i := range a.Choices {
		m := &a.Choices[i].Message
		n += 160
		if m.Content != nil {
			n += len(*m.Content)
		}
		if m.ReasoningContent != nil {
			n += len(*m.ReasoningContent)
		}
		for j := range m.Citations {
			n += 160 + len(m.Citations[j].ContextText) + len(m.Citations[j].ResponseText)
		}
		for j := range m.Documents {
			n += 32 + len(m.Documents[j].Text)
		}
		n += len(m.ParseError)
		for j := range m.Hallucinations {
			n += 128 + len(m.Hallucinations[j].ResponseText)
		}
	}
	return n + n/8
}

// appendRaw appends a raw JSON value as encoding/json does (compacted, HTML escaped); rare
// enough to leave to it.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("granitestage: encoding the chat completion: %w", err)
	}
	return append(dst, b...), nil
}

func appendChoice(dst []byte, c *chatChoice) ([]byte, error) {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(c.Index), 10)
	m := &c.Message
	dst = append(dst, `,"message":{"role":`...)
	dst = appendJSONString(dst, m.Role)
	dst = append(dst, `,"content":`...)
	if m.Content == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, *m.Content)
	}
	if m.ReasoningContent != nil {
		dst = append(dst, `,"reasoning_content":`...)
		dst = appendJSONString(dst, *m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		b, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return nil, fmt.Errorf("granitestage: encoding the chat completion: %w", err)
		}
		dst = append(append(dst, `,"tool_calls":`...), b...)
	}
	dst = appendExtras(dst, m.Citations, m.Documents, m.Hallucinations)
	if m.ParseError != "" {
		dst = append(dst, `,"parse_error":`...)
		dst = appendJSONString(dst, m.ParseError)
	}
	dst = append(dst, `},"logprobs":`...)
	if c.Logprobs == nil || string(c.Logprobs) == "null" {
		dst = append(dst, "null"...)
	} else {
		var err error
		if dst, err = appendRaw(dst, c.Logprobs); err != nil {
			return nil, err
		}
	}
	dst = append(dst, `,"finish_reason":`...)
	dst = appendJSONString(dst, c.FinishReason)
	return append(dst, '}'), nil
}

// appendExtras appends Granite's members of a message, each after a comma, as the omitempty
// fields of chatMessage and extras write them.
func appendExtras(dst []byte, cites []granite.Citation, docs []granite.CitedDocument, hallucs []granite.Hallucination) []byte {
	if len(cites) > 0 {
		dst = append(dst, `,"citations":[`...)
		for i := range cites {
			c := &cites[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"citation_id":`...)
			dst = appendJSONString(dst, c.CitationID)
			dst = append(dst, `,"doc_id":`...)
			dst = appendJSONString(dst, c.DocID)
			dst = append(dst, `,"context_text":`...)
			dst = appendJSONString(dst, c.ContextText)
			dst = append(dst, `,"context_begin":`...)
			dst = strconv.AppendInt(dst, int64(c.ContextBegin), 10)
			dst = append(dst, `,"context_end":`...)
			dst = strconv.AppendInt(dst, int64(c.ContextEnd), 10)
			dst = append(dst, `,"response_text":`...)
			dst = appendJSONString(dst, c.ResponseText)
			dst = append(dst, `,"response_begin":`...)
			dst = strconv.AppendInt(dst, int64(c.ResponseBegin), 10)
			dst = append(dst, `,"response_end":`...)
			dst = strconv.AppendInt(dst, int64(c.ResponseEnd), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(docs) > 0 {
		dst = append(dst, `,"documents":[`...)
		for i := range docs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"doc_id":`...)
			dst = appendJSONString(dst, docs[i].DocID)
			dst = append(dst, `,"text":`...)
			dst = appendJSONString(dst, docs[i].Text)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(hallucs) > 0 {
		dst = append(dst, `,"hallucinations":[`...)
		for i := range hallucs {
			h := &hallucs[i]
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"hallucination_id":`...)
			dst = appendJSONString(dst, h.HallucinationID)
			dst = append(dst, `,"risk":`...)
			dst = appendJSONString(dst, h.Risk)
			dst = append(dst, `,"response_text":`...)
			dst = appendJSONString(dst, h.ResponseText)
			dst = append(dst, `,"response_begin":`...)
			dst = strconv.AppendInt(dst, int64(h.ResponseBegin), 10)
			dst = append(dst, `,"response_end":`...)
			dst = strconv.AppendInt(dst, int64(h.ResponseEnd), 10)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return dst
}

// appendCompletionRequest appends the /v1/completions request body {model, prompt, stream,
// stream_options (when not nil), params...} as json.Marshal of that map writes it: members sorted by name,
// each value as encoding/json writes it.
func appendCompletionRequest(dst []byte, model json.RawMessage, prompt string, stream bool, streamOptions json.RawMessage, params map[string]any) ([]byte, error) {
	keys := make([]string, 0, len(params)+4)
	for k := range params {
		switch {
		case k == "model", k == "prompt", k == "stream", k == "stream_options" && streamOptions != nil:
		default:
			keys = append(keys, k)
		}
	}
	keys = append(keys, "model", "prompt", "stream")
	if streamOptions != nil {
		keys = append(keys, "stream_options")
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		var err error
		switch k {
		case "model":
			dst, err = appendValue(dst, model)
		case "prompt":
			dst = appendJSONString(dst, prompt)
		case "stream":
			dst = strconv.AppendBool(dst, stream)
		case "stream_options":
			if streamOptions != nil {
				dst, err = appendValue(dst, streamOptions)
			} else {
				dst, err = appendValue(dst, params[k])
			}
		default:
			dst, err = appendValue(dst, params[k])
		}
		if err != nil {
			return nil, fmt.Errorf("encoding the completion request: %w", err)
		}
	}
	return append(dst, '}'), nil
}

// appendValue appends v as encoding/json writes it inside a map[string]any.
func appendValue(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case json.RawMessage:
		if v == nil {
			return append(dst, "null"...), nil
		}
		if isPlainNumber(v) || isPlainString(v) {
			return append(dst, v...), nil
		}
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case string:
		return appendJSONString(dst, v), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// isPlainNumber says whether raw is a bare JSON number (its own compact form); the commonest
// completion parameters (max_tokens, temperature, n) are.
func isPlainNumber(raw []byte) bool {
	if len(raw) == 0 || jsonwire.KindOf(raw[0]) != jsonwire.Number {
		return false // not a number (a failed ReadNumber would allocate its error)
	}
	s := newScan(raw)
	t, err := s.ReadNumber()
	return err == nil && t.End == len(raw)
}

// isPlainString says whether raw is a JSON string of printable ASCII that encoding/json writes
// unchanged (no escapes, no HTML characters): a model's name, a stop word.
func isPlainString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
