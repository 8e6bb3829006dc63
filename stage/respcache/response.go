package respcache

import (
	"encoding/json"
	"errors"
	"strconv"

	"github.com/infergate/infergate/core/pipeline"
)

// Reasons an answer is not stored, as the metrics count them.
const (
	skipStatus   = "status"        // not a 200
	skipPartial  = "partial"       // the body did not end cleanly (upstream failure, client gone, no [DONE])
	skipTooLarge = "too_large"     // over MaxEntryBytes
	skipFinish   = "finish_reason" // a choice that did not finish with stop or length
	skipTools    = "tool_calls"    // an answer calling tools, without ToolCalls
	skipInvalid  = "invalid"       // not a completion's JSON
	skipStore    = "store_error"   // the store failed
)

var errNotObject = errors.New("respcache: answer is not a JSON object")

// storable checks a complete non-streamed answer and returns what the store keeps: the answer
// without its id and created (a hit gets fresh ones), as compact JSON with sorted members.
// reason says why it may not be stored. Members are matched exactly, as a client reads them
// (encoding/json's struct decoding would also take "Finish_Reason"). A stream request may hit the
// entry too, so the answer must also replay as chunks for path: a case variant of a member that
// the replay reads ("messAge" beside "message") passes the exact checks but not the replay's.
func storable(path string, resp []byte, toolCalls bool) (template []byte, reason string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(resp, &m); err != nil || m == nil {
		return nil, skipInvalid
	}
	if e, ok := m["error"]; ok && string(e) != "null" {
		return nil, skipInvalid
	}
	var choices []map[string]json.RawMessage
	if err := json.Unmarshal(m["choices"], &choices); err != nil || len(choices) == 0 {
		return nil, skipInvalid
	}
	for _, c := range choices {
		if c == nil {
			return nil, skipInvalid
		}
		var index int
		if raw, ok := c["index"]; ok && json.Unmarshal(raw, &index) != nil {
			return nil, skipInvalid
		}
		var finish *string
		if json.Unmarshal(c["finish_reason"], &finish) != nil || finish == nil {
			return nil, skipFinish
		}
		calls := false
		if raw, ok := c["message"]; ok {
			var msg map[string]json.RawMessage
			if json.Unmarshal(raw, &msg) != nil || msg == nil {
				return nil, skipInvalid
			}
			var content *string
			if raw, ok := msg["content"]; ok && json.Unmarshal(raw, &content) != nil {
				return nil, skipInvalid
			}
			var tc []json.RawMessage
			if raw, ok := msg["tool_calls"]; ok && json.Unmarshal(raw, &tc) != nil {
				return nil, skipInvalid
			}
			fc, ok := msg["function_call"]
			calls = len(tc) > 0 || ok && string(fc) != "null"
		} else if raw, ok := c["text"]; ok {
			var text string
			if json.Unmarshal(raw, &text) != nil {
				return nil, skipInvalid
			}
		}
		switch *finish {
		case "stop", "length":
		case "tool_calls", "function_call":
			calls = true
		default:
			return nil, skipFinish
		}
		if calls && !toolCalls {
			return nil, skipTools
		}
	}
	delete(m, "id")
	delete(m, "created")
	t, err := json.Marshal(m)
	if err != nil {
		return nil, skipInvalid
	}
	if _, err := replay(path, resp, replayOptions{}); err != nil {
		return nil, skipInvalid
	}
	return t, ""
}

// idPrefix is the id prefix of path's answers.
func idPrefix(path string) string {
	if path == pathCompletions {
		return "cmpl-"
	}
	return "chatcmpl-"
}

// fullAnswer is a stored template with a fresh id and created: the answer a hit sends.
func fullAnswer(template []byte, id string, created int64) ([]byte, error) {
	if len(template) < 2 || template[0] != '{' || template[len(template)-1] != '}' {
		return nil, errNotObject
	}
	b := make([]byte, 0, len(template)+len(id)+40)
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"created":`...)
	b = strconv.AppendInt(b, created, 10)
	if len(template) > 2 {
		b = append(b, ',')
	}
	return append(b, template[1:]...), nil
}

// hitUsage is a hit's usage: answered, at no upstream cost.
var hitUsage = pipeline.Usage{Status: 200, Cached: true}
