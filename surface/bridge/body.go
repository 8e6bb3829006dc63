package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/lib/tensor"
)

// reservedKeys are the body members the bridge sets from the request's inputs; sampling_parameters
// may not set them.
var reservedKeys = map[string]bool{"model": true, "prompt": true, "messages": true, "stream": true}

// maxChoices bounds the choices one request may ask for or an upstream may answer (by index), so
// a number in a request or an answer never sizes an allocation unchecked.
const maxChoices = 1024

// requestBody builds the OpenAI request body for model: the prompt (or, for chat, one user
// message), the stream flag, chat_template_kwargs when kwargs is not nil, and then every member
// of the sampling_parameters JSON object, which must not set what the bridge sets. It also
// returns the number of choices asked for (n, default 1). Bad sampling parameters or kwargs are
// INVALID_ARGUMENT, naming the problem.
func requestBody(model string, chat bool, text []byte, stream bool, sampling, kwargs []byte) ([]byte, int, error) {
	b := make([]byte, 0, 96+len(model)+len(text)+len(sampling)+len(kwargs))
	b = append(b, `{"model":`...)
	b = tensor.AppendJSONString(b, model)
	if chat {
		b = append(b, `,"messages":[{"role":"user","content":`...)
		b = tensor.AppendJSONString(b, text)
		b = append(b, `}]`...)
	} else {
		b = append(b, `,"prompt":`...)
		b = tensor.AppendJSONString(b, text)
	}
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, stream)
	if kwargs != nil {
		kw, err := validKwargs(kwargs)
		if err != nil {
			return nil, 0, err
		}
		b = append(b, `,"`+InputChatTemplateKwargs+`":`...)
		b = append(b, kw...)
	}
	n := 1
	if sampling != nil {
		var err error
		if b, n, err = appendSampling(b, sampling, kwargs != nil); err != nil {
			return nil, 0, err
		}
	}
	return append(b, '}'), n, nil
}

// appendSampling appends the members of the JSON object sampling to the body b, each as
// ",key:value" with the key re-encoded (so an escaped spelling of a reserved key is caught) and the
// value compacted. With kwargs (the chat_template_kwargs input is set), it may not set that too.
func appendSampling(b, sampling []byte, kwargs bool) ([]byte, int, error) {
	if !utf8.Valid(sampling) {
		return nil, 0, invalid("%s must be UTF-8 JSON", inSampling)
	}
	dec := json.NewDecoder(bytes.NewReader(sampling))
	dec.UseNumber()
	syntax := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return invalid("%s is not valid JSON: %v", inSampling, err)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, invalid("%s must be a JSON object, got nothing", inSampling)
		}
		return nil, 0, syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, 0, invalid("%s must be a JSON object", inSampling)
	}
	n := 1
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, 0, syntax(err)
		}
		key, _ := tok.(string) // object keys are strings
		if reservedKeys[key] {
			return nil, 0, invalid("%s must not set '%s': the bridge sets model, prompt (or messages) and stream from the request", inSampling, key)
		}
		if kwargs && key == InputChatTemplateKwargs {
			return nil, 0, invalid("%s must not set '%s' when the input '%s' does", inSampling, key, InputChatTemplateKwargs)
		}
		if seen[key] {
			return nil, 0, invalid("%s sets '%s' twice", inSampling, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, 0, syntax(err)
		}
		if key == "n" && string(v) != "null" {
			x, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || x < 1 || x > maxChoices {
				return nil, 0, invalid("%s: 'n' must be an integer from 1 to %d, got %s", inSampling, maxChoices, clip(v, 64))
			}
			n = int(x)
		}
		b = append(b, ',')
		b = tensor.AppendJSONString(b, key)
		b = append(b, ':')
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			return nil, 0, syntax(err)
		}
		b = append(b, c.Bytes()...)
	}
	if _, err := dec.Token(); err != nil {
		return nil, 0, syntax(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, 0, invalid("%s must hold one JSON object and nothing after it", inSampling)
	}
	return b, n, nil
}

// clip shortens untrusted text quoted in an error message, keeping it UTF-8 (protobuf strings
// such as a stream's error_message must be).
func clip(b []byte, max int) string {
	s, more := string(b), ""
	if len(s) > max {
		i := max
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s, more = s[:i], "..."
	}
	return strings.ToValidUTF8(s, "\ufffd") + more
}
