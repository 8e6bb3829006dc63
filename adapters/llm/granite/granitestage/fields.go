package granitestage

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/infergate/infergate/adapters/pipeline"
)

// requestFields is req.Fields() read with the stage's scanner: the body's top-level members,
// each value the body's own bytes (the body does not change; the stage only reads them), where
// Fields decodes the body through reflection and copies every value. A body the scanner does
// not take whole (an escaped or non-ASCII member name, deep nesting, an error) goes to Fields.
func requestFields(req *pipeline.Request) (map[string]json.RawMessage, error) {
	if f, ok := scanFields(req.Body()); ok {
		return f, nil
	}
	return req.Fields()
}

func scanFields(body []byte) (map[string]json.RawMessage, bool) {
	s := jscan{b: body}
	f := make(map[string]json.RawMessage, 16)
	ok := s.object(func(name []byte) bool {
		for _, c := range name {
			if c >= utf8.RuneSelf {
				return false // encoding/json's keys replace invalid UTF-8
			}
		}
		s.ws()
		from := s.i
		if !s.skip(1) {
			return false
		}
		f[string(name)] = body[from:s.i:s.i]
		return true
	})
	if !ok {
		return nil, false
	}
	s.ws()
	return f, s.i == len(body)
}
