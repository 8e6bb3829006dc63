package sessions

import (
	"bytes"
	"encoding/json"
)

// assistantMessage is the message of choice 0 of a whole chat completion response, ready to be
// sent back as history: its role, content, tool calls, name, refusal and legacy function call,
// and nothing else (reasoning is not fed back to models, and servers reject fields of answers,
// such as annotations, in requests). ok is false when the response has no such choice with a
// finish_reason.
func assistantMessage(resp []byte) (json.RawMessage, bool) {
	var r struct {
		Choices []struct {
			Index        int                        `json:"index"`
			Message      map[string]json.RawMessage `json:"message"`
			FinishReason *string                    `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(resp, &r) != nil {
		return nil, false
	}
	for _, c := range r.Choices {
		if c.Index != 0 {
			continue
		}
		if c.FinishReason == nil || *c.FinishReason == "" || c.Message == nil {
			return nil, false
		}
		// Written by hand, role first: role() reads such a message without decoding it.
		content, ok := c.Message["content"]
		if !ok {
			content = json.RawMessage("null")
		}
		b := append([]byte(`{"role":"assistant","content":`), content...)
		for _, k := range []string{"tool_calls", "name", "refusal", "function_call"} {
			if v, ok := c.Message[k]; ok && !isEmpty(v) {
				b = append(b, `,"`+k+`":`...)
				b = append(b, v...)
			}
		}
		return append(b, '}'), true
	}
	return nil, false
}

// isEmpty: null, or an empty array.
func isEmpty(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return true
	}
	if len(v) >= 2 && v[0] == '[' {
		return len(bytes.TrimSpace(v[1:len(v)-1])) == 0
	}
	return false
}
