package responses

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/infergate/infergate/lib/openaiwire"
)

// inputItems is a request's input as the items a stored response lists: a string input as the
// user message it stands for, an item without a type but with a role as a message, a message's
// string content as one text part (input_text, output_text for the assistant), and an id for
// each item that has none (its type's prefix, the response id's suffix, "in" and its index),
// since OpenAI's input_items pages by item id. The items share nothing with body.
func inputItems(body []byte, respID string) ([]json.RawMessage, error) {
	raw, err := openaiwire.ResponsesTurnItems(body, []byte(`{"output":[]}`))
	if err != nil {
		return nil, err
	}
	suffix := respID[min(len(respID), len("resp_")):]
	out := make([]json.RawMessage, 0, len(raw))
	for i, it := range raw {
		n, err := normalizeItem(it, suffix, i)
		if err != nil {
			return nil, fmt.Errorf("input[%d]: %w", i, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func normalizeItem(item []byte, suffix string, index int) (json.RawMessage, error) {
	b, err := openaiwire.Parse(item)
	if err != nil {
		return nil, err
	}
	typ := stringMember(b, "type")
	role := stringMember(b, "role")
	if typ == "" && role != "" {
		typ = "message"
		b.Set("type", []byte(`"message"`))
	}
	if typ == "message" {
		if c, ok := b.Get("content"); ok && len(c) > 0 && c[0] == '"' {
			part := "input_text"
			if role == "assistant" {
				part = "output_text"
			}
			v := append([]byte(`[{"type":"`+part+`","text":`), c...)
			if part == "output_text" {
				v = append(v, `,"annotations":[]`...)
			}
			b.Set("content", append(v, "}]"...))
		}
	}
	if stringMember(b, "id") == "" { // absent, empty or not a string: the pager needs one
		prefix := "item_"
		switch typ {
		case "message":
			prefix = "msg_"
		case "function_call":
			prefix = "fc_"
		case "function_call_output":
			prefix = "fco_"
		case "reasoning":
			prefix = "rs_"
		}
		b.Set("id", quote(prefix+suffix+"_in"+strconv.Itoa(index)))
	}
	if !b.Dirty() {
		return append(json.RawMessage(nil), item...), nil
	}
	return b.AppendJSON(nil), nil
}

// stringMember is b's member name when it is a JSON string ("" otherwise).
func stringMember(b *openaiwire.Body, name string) string {
	v, ok := b.Get(name)
	if !ok || len(v) == 0 || v[0] != '"' {
		return ""
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return ""
	}
	return s
}

// outputItems are a stored Response's output items.
func outputItems(response []byte) ([]openaiwire.Raw, error) {
	return openaiwire.ResponsesTurnItems([]byte(`{}`), response)
}

// itemPage is one page of items as OpenAI's cursor page: newest first when desc, starting after
// the item with id after (when set), at most limit items.
func itemPage(items []json.RawMessage, desc bool, after string, limit int) ([]byte, error) {
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
		if desc {
			order[i] = len(items) - 1 - i
		}
	}
	start := 0
	if after != "" {
		start = -1
		for k, i := range order {
			if itemID(items[i]) == after {
				start = k + 1
				break
			}
		}
		if start < 0 {
			return nil, &openaiwire.ResponsesError{Message: fmt.Sprintf("No input item with id '%s' in this response.", after),
				Type: "invalid_request_error", Param: "after", Code: "invalid_value"}
		}
	}
	end := min(len(order), start+limit)
	b := []byte(`{"object":"list","data":[`)
	for k := start; k < end; k++ {
		if k > start {
			b = append(b, ',')
		}
		b = append(b, items[order[k]]...)
	}
	b = append(b, `],"first_id":`...)
	if start < end {
		b = append(b, quote(itemID(items[order[start]]))...)
		b = append(b, `,"last_id":`...)
		b = append(b, quote(itemID(items[order[end-1]]))...)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, end < len(order))
	return append(b, '}'), nil
}

func itemID(item []byte) string {
	b, err := openaiwire.Parse(item)
	if err != nil {
		return ""
	}
	return stringMember(b, "id")
}
