package granitestage

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/granite"
)

// The stage writes its JSON by hand (its answers and chunks through openaiwire, Granite's
// members of a message and the completion request here), byte for byte as encoding/json.Marshal
// wrote the stage's former structs (TestWriteIsMarshal, TestChunksAreMarshal and
// FuzzDecodeCompletion hold it to that): reflection over a 4,000-character answer and its
// citations cost more than parsing them.

// answerSize is about the length of the chat completion of results: their texts, an eighth
// more for escapes, and each object's member names and numbers.
func answerSize(results []granite.Result) int {
	n := 256
	for i := range results {
		m := &results[i].NextMessage
		n += 160 + len(m.Content)
		if m.ReasoningContent != nil {
			n += len(*m.ReasoningContent)
		}
		for j := range m.ToolCalls {
			n += 64 + len(m.ToolCalls[j].Name) + len(m.ToolCalls[j].Arguments)
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

// appendExtras appends Granite's members of a message (an answer's message, or a stream's
// finish delta), each after a comma, as openaiwire's Extra takes them: citations, documents,
// hallucinations and parse_error, each left out when empty, in the order and with the members
// and escaping json.Marshal gave them (TestWriteIsMarshal, TestChunksAreMarshal).
func appendExtras(dst []byte, cites []granite.Citation, docs []granite.CitedDocument, hallucs []granite.Hallucination, parseError string) []byte {
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
	if parseError != "" {
		dst = append(dst, `,"parse_error":`...)
		dst = appendJSONString(dst, parseError)
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
