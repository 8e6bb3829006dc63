package openai

import (
	"encoding/json"
	"net/http"
)

// Write answers an HTTP request with the error: its status, its headers and OpenAI's error object.
func (e *Error) Write(w http.ResponseWriter) { writeError(w, e) }

// JSON returns OpenAI's error object for e, {"error":{"message":...,"type":...,"param":...,"code":...}},
// as a response body carries it.
func (e *Error) JSON() []byte {
	b, err := json.Marshal(newErrorBody(e))
	if err != nil { // a struct of strings always encodes
		panic(err)
	}
	return b
}
