package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The engine refuses text, echoes ids by default, and answers -reply's words when given.
func TestTokenEngine(t *testing.T) {
	post := func(h http.Handler, body string) (int, string) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		res, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	echo := newEngine("qwen", "").Handler()
	status, body := post(echo, `{"model":"qwen","prompt":"hi"}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, "this engine has no tokenizer")
	status, body = post(echo, `{"model":"qwen","prompt":[9707,1879]}`)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"token_ids":[9707,1879]`)
	status, body = post(newEngine("qwen", "Hi there you").Handler(), `{"model":"qwen","prompt":[1],"max_tokens":2}`)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, body, `"text":"Hi there"`)
	assert.Contains(t, body, `"finish_reason":"length"`)
}
