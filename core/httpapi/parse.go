package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Object holds the fields of OpenAI's error object.
type Object struct {
	Message string
	Type    string // invalid_request_error, server_error, ...
	Param   string // the request field at fault, if any
	Code    string // a string code, or a numeric one's digits
}

// shape holds the error bodies OpenAI-compatible servers send: OpenAI's {"error": {...}}, vLLM's
// flat {"object": "error", "message": ..., "code": 404}, a plain {"error": "text"} (Ollama's
// native API), FastAPI's {"detail": ...}. Every field is read as raw JSON, so that one of an
// unexpected type is ignored instead of hiding the rest.
type shape struct {
	Error  json.RawMessage `json:"error"`
	Object json.RawMessage `json:"object"`
	Detail json.RawMessage `json:"detail"`
	fields
}

type fields struct {
	Message json.RawMessage `json:"message"`
	Type    json.RawMessage `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

func (f *fields) object(status int) Object {
	o := Object{Message: text(f.Message), Type: text(f.Type), Param: scalarText(f.Param), Code: scalarText(f.Code)}
	if o.Type == "" {
		o.Type = TypeFor(status)
	}
	return o
}

// maxDetail bounds the JSON of a FastAPI detail that is not a string (a list of validation
// errors), quoted as the message.
const maxDetail = 512

// ParseBody reads OpenAI's error object from an upstream's error body, in any of the shapes
// OpenAI-compatible servers send. Missing fields are "", except Type, which defaults to TypeFor
// the status. ok is false when the body holds no message: obj then holds only Type, and the
// surface words the message itself.
//
// Messages are valid UTF-8 (JSON strings decode as such; a detail quoted as JSON is cut to 512
// bytes and its invalid bytes replaced), not otherwise shortened: pass a body already bounded.
func ParseBody(status int, body []byte) (obj Object, ok bool) {
	var s shape
	if json.Unmarshal(body, &s) == nil {
		var inner fields
		switch {
		case text(s.Error) != "":
			return Object{Message: text(s.Error), Type: TypeFor(status)}, true
		case json.Unmarshal(s.Error, &inner) == nil && text(inner.Message) != "":
			return inner.object(status), true
		case text(s.Message) != "":
			return s.fields.object(status), true
		case text(s.Detail) != "":
			return Object{Message: text(s.Detail), Type: TypeFor(status)}, true
		case present(s.Detail):
			return Object{Message: clip(s.Detail, maxDetail), Type: TypeFor(status)}, true
		}
	}
	return Object{Type: TypeFor(status)}, false
}

var errorKey = []byte(`"error"`)

// ParseEvent reads an error an upstream sent in band, as a stream's event or a 200 answer holding
// an error object instead of a completion or chunk: OpenAI's {"error": {...}} (or any non-null
// "error"), vLLM's flat {"object": "error", ...}. ok is false when data is not one. obj is
// ParseBody's for status 500, with Message "" when the error holds none (the surface words it).
// status is the error's numeric code (its Code, or for an error without a message the code it
// holds) when that is an HTTP error status, as vLLM sends its errors' statuses; else 500.
//
// A chunk's text cannot hold `"error"` unescaped, so a chunk costs one byte search; only error
// objects (and a chunk whose object or finish reason is literally "error") are decoded.
func ParseEvent(data []byte) (obj Object, status int, ok bool) {
	if !bytes.Contains(data, errorKey) {
		return Object{}, 0, false
	}
	var s struct {
		Error  json.RawMessage `json:"error"`
		Object json.RawMessage `json:"object"`
		Code   json.RawMessage `json:"code"`
	}
	if json.Unmarshal(data, &s) != nil || (!present(s.Error) && text(s.Object) != "error") {
		return Object{}, 0, false
	}
	obj, found := ParseBody(http.StatusInternalServerError, data)
	if !found {
		var inner struct {
			Code json.RawMessage `json:"code"`
		}
		if json.Unmarshal(s.Error, &inner) == nil && present(inner.Code) {
			obj.Code = scalarText(inner.Code)
		} else {
			obj.Code = scalarText(s.Code)
		}
	}
	status = http.StatusInternalServerError
	if n, err := strconv.Atoi(obj.Code); err == nil && n >= 400 && n <= 599 {
		status = n
	}
	return obj, status, true
}

// present reports whether a field came, and not as null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// text is a JSON string's text; "" for anything else.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// scalarText is a JSON string's text or a number's digits; "" for null and anything else.
func scalarText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return text(raw)
	}
	if _, err := strconv.ParseFloat(string(raw), 64); err == nil {
		return string(raw)
	}
	return ""
}

// clip shortens untrusted text quoted in a message to at most n bytes, without cutting a
// character and marking the cut with "...", and replaces invalid UTF-8.
func clip(b []byte, n int) string {
	s, more := string(b), ""
	if len(s) > n {
		i := n
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s, more = s[:i], "..."
	}
	return strings.ToValidUTF8(s, "\ufffd") + more
}
