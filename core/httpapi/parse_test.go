package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/stretchr/testify/assert"
)

func TestParseBody(t *testing.T) {
	const invalid, server = "invalid_request_error", "server_error"
	cases := []struct {
		name, body string
		want       httpapi.Object
		ok         bool
	}{
		{"openai", `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			httpapi.Object{Message: "Rate limit reached", Type: "requests", Code: "rate_limit_exceeded"}, true},
		{"openai without type", `{"error":{"message":"bad key"}}`, httpapi.Object{Message: "bad key", Type: invalid}, true},
		{"vllm flat", `{"object":"error","message":"bad","type":"BadRequestError","param":"n","code":400}`,
			httpapi.Object{Message: "bad", Type: "BadRequestError", Param: "n", Code: "400"}, true},
		{"vllm nested", `{"error":{"message":"bad","type":"BadRequestError","param":null,"code":400}}`,
			httpapi.Object{Message: "bad", Type: "BadRequestError", Code: "400"}, true},
		{"plain string", `{"error":"model 'x' not found"}`, httpapi.Object{Message: "model 'x' not found", Type: invalid}, true},
		{"fastapi", `{"detail":"Not Found"}`, httpapi.Object{Message: "Not Found", Type: invalid}, true},
		{"fastapi list", `{"detail":[{"loc":["body"],"msg":"field required"}]}`,
			httpapi.Object{Message: `[{"loc":["body"],"msg":"field required"}]`, Type: invalid}, true},
		{"fastapi list, invalid UTF-8", "{\"detail\":[\"\xff\"]}", httpapi.Object{Message: "[\"\ufffd\"]", Type: invalid}, true},
		{"error object without a message", `{"error":{"code":1},"message":"flat"}`, httpapi.Object{Message: "flat", Type: invalid}, true},
		{"empty error string", `{"error":"","detail":"d"}`, httpapi.Object{Message: "d", Type: invalid}, true},
		{"fields of other types are ignored", `{"object":5,"message":"m","type":7,"param":{},"code":[1]}`, httpapi.Object{Message: "m", Type: invalid}, true},
		{"null detail", `{"detail":null}`, httpapi.Object{Type: invalid}, false},
		{"no message", `{"error":{"code":400}}`, httpapi.Object{Type: invalid}, false},
		{"text", "upstream connect error\n", httpapi.Object{Type: invalid}, false},
		{"empty", "", httpapi.Object{Type: invalid}, false},
		{"binary", "\xff\xfe", httpapi.Object{Type: invalid}, false},
	}
	for _, tc := range cases {
		got, ok := httpapi.ParseBody(http.StatusNotFound, []byte(tc.body))
		assert.Equal(t, tc.want, got, tc.name)
		assert.Equal(t, tc.ok, ok, tc.name)
	}
	got, ok := httpapi.ParseBody(http.StatusBadGateway, []byte(`{"message":"m"}`))
	assert.Equal(t, httpapi.Object{Message: "m", Type: server}, got, "a 5xx without a type is a server_error")
	assert.True(t, ok)
	got, _ = httpapi.ParseBody(http.StatusBadRequest, []byte(`{"detail":["`+strings.Repeat("é", 400)+`"]}`))
	assert.True(t, utf8.ValidString(got.Message))
	assert.LessOrEqual(t, len(got.Message), 515, "a long detail is cut")
	assert.True(t, strings.HasSuffix(got.Message, "..."), got.Message)
}

func TestParseEvent(t *testing.T) {
	cases := []struct {
		data   string
		ok     bool
		status int
		msg    string
	}{
		{`{"id":"x","object":"chat.completion.chunk","choices":[{"delta":{"content":"\"error\""}}]}`, false, 0, ""},
		{`{"id":"x","object":"chat.completion.chunk","choices":[{"delta":{},"finish_reason":"error"}]}`, false, 0, ""},
		{`{"id":"x","object":"chat.completion.chunk","choices":[],"error":null}`, false, 0, ""},
		{`"error"`, false, 0, ""},
		{`{"error":{"message":"oops","type":"BadRequestError","code":400}}`, true, 400, "oops"},
		{`{"object":"error","message":"engine dead","type":"InternalServerError","code":503}`, true, 503, "engine dead"},
		{`{"error":{"message":"oops","type":"server_error","code":null}}`, true, 500, "oops"},
		{`{"error":{"message":"slow down","code":"429"}}`, true, 429, "slow down"},
		{`{"error":{"message":"oops","code":200}}`, true, 500, "oops"},
		{`{"error":"plain"}`, true, 500, "plain"},
		{`{"id":"x","error":{"code":404}}`, true, 404, ""},
	}
	for _, tc := range cases {
		obj, status, ok := httpapi.ParseEvent([]byte(tc.data))
		assert.Equal(t, tc.ok, ok, tc.data)
		assert.Equal(t, tc.status, status, tc.data)
		assert.Equal(t, tc.msg, obj.Message, tc.data)
	}
	obj, _, _ := httpapi.ParseEvent([]byte(`{"error":{"message":"oops"}}`))
	assert.Equal(t, "server_error", obj.Type, "an in-band error without a type is a server_error")
}

// FuzzParse: whatever an upstream sends, as an error body or a stream event, parsing never panics;
// a message found is non-empty valid UTF-8, an event's status is an HTTP error status (which every
// surface maps to a valid code).
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"error":{"message":"m","type":"t","param":null,"code":429}}`))
	f.Add([]byte(`{"object":"error","message":"m","code":"x"}`))
	f.Add([]byte(`{"error":"text","detail":[1]}`))
	f.Add([]byte(`{"detail":[{"loc":["body"],"msg":"field required"}]}`))
	f.Add([]byte(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`))
	f.Add([]byte(`{"error":{"code":503},"code":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, ok := httpapi.ParseBody(http.StatusBadGateway, b)
		if ok != (obj.Message != "") || !utf8.ValidString(obj.Message) || obj.Type == "" ||
			!utf8.ValidString(obj.Type) || !utf8.ValidString(obj.Param) || !utf8.ValidString(obj.Code) {
			t.Fatalf("ParseBody(%q) = %+v, %v", b, obj, ok)
		}
		obj, status, ok := httpapi.ParseEvent(b)
		if !ok {
			return
		}
		if status < 400 || status > 599 || obj.Type == "" || !utf8.ValidString(obj.Message) {
			t.Fatalf("ParseEvent(%q) = %+v, %d", b, obj, status)
		}
		for _, s := range []httpapi.Surface{httpapi.OpenAIService, httpapi.KServe} {
			if c := httpapi.Code(s, status); c < connect.CodeCanceled || c > connect.CodeUnauthenticated {
				t.Fatalf("ParseEvent(%q): status %d is %v on %v", b, status, c, s)
			}
		}
	})
}
