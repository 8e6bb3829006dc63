package openai

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestUpstreamError: an upstream's error answer keeps its error object (httpapi.ParseBody, tested
// there) and its status's code; a body without one gets a message that names the status.
func TestUpstreamError(t *testing.T) {
	e := upstreamError(http.StatusTooManyRequests, []byte(`{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`))
	assert.Equal(t, connect.CodeResourceExhausted, e.code)
	assert.True(t, proto.Equal(&openaiv1.Error{Message: "Rate limit reached", Type: "requests", Code: "rate_limit_exceeded"}, e.obj), "%v", e.obj)
	cases := []struct {
		name, body string
		want       *openaiv1.Error
	}{
		{"text", "upstream connect error\n", &openaiv1.Error{Message: "upstream answered HTTP 404: upstream connect error", Type: "invalid_request_error"}},
		{"empty", "", &openaiv1.Error{Message: "upstream answered HTTP 404", Type: "invalid_request_error"}},
		{"binary", "\xff\xfe", &openaiv1.Error{Message: "upstream answered HTTP 404", Type: "invalid_request_error"}},
	}
	for _, tc := range cases {
		e := upstreamError(http.StatusNotFound, []byte(tc.body))
		assert.Equal(t, connect.CodeNotFound, e.code, tc.name)
		assert.True(t, proto.Equal(tc.want, e.obj), "%s: %v", tc.name, e.obj)
	}
	e = upstreamError(http.StatusBadGateway, []byte(strings.Repeat("é", 400)))
	assert.Equal(t, connect.CodeUnavailable, e.code)
	assert.True(t, utf8.ValidString(e.obj.GetMessage()))
	assert.Less(t, len(e.obj.GetMessage()), 600, "a long body is cut")
}

func TestEventError(t *testing.T) {
	for data, want := range map[string]connect.Code{
		`{"id":"x","object":"chat.completion.chunk","choices":[{"delta":{"content":"\"error\""}}]}`:    0,
		`{"id":"x","object":"chat.completion.chunk","choices":[{"delta":{},"finish_reason":"error"}]}`: 0,
		`{"error":{"message":"oops","type":"BadRequestError","code":400}}`:                             connect.CodeInvalidArgument,
		`{"object":"error","message":"engine dead","type":"InternalServerError","code":503}`:           connect.CodeUnavailable,
		`{"error":{"message":"oops","type":"server_error","code":null}}`:                               connect.CodeInternal,
		`{"error":{"type":"server_error","code":429}}`:                                                 connect.CodeResourceExhausted,
		`"error"`: 0,
	} {
		e := eventError([]byte(data))
		if want == 0 {
			assert.Nil(t, e, data)
			continue
		}
		require.NotNil(t, e, data)
		assert.Equal(t, want, e.code, data)
		assert.NotEmpty(t, e.obj.GetMessage())
	}
}

// FuzzUpstreamJSON: whatever an upstream sends, as an error body, a stream event or a response,
// decoding returns a message or an error, never panics; errors always have a message and a
// valid code. (httpapi's FuzzParse fuzzes the error parser itself.)
func FuzzUpstreamJSON(f *testing.F) {
	f.Add([]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi","tool_calls":[{"index":0,"function":{"arguments":"{"}}]},"logprobs":null,"finish_reason":null}]}`))
	f.Add([]byte(`{"id":"c","object":"text_completion","choices":[{"text":"x","logprobs":{"tokens":["x"],"token_logprobs":[null]}}],"usage":{"prompt_tokens":1}}`))
	f.Add([]byte(`{"object":"list","data":[{"index":0,"embedding":[0.1,1e-45,3.4e39]}]}`))
	f.Add([]byte(`{"error":{"message":"m","type":"t","param":null,"code":429}}`))
	f.Add([]byte(`{"object":"error","message":"m","code":"x"}`))
	f.Add([]byte(`{"error":"text","detail":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if e := upstreamError(http.StatusBadGateway, b); e.code != connect.CodeUnavailable || e.obj.GetMessage() == "" || !utf8.ValidString(e.obj.GetMessage()) {
			t.Fatalf("upstream error %v from %q", e, b)
		}
		if e := eventError(b); e != nil && (e.code < connect.CodeCanceled || e.code > connect.CodeUnauthenticated || e.obj.GetMessage() == "") {
			t.Fatalf("event error %v from %q", e, b)
		}
		for _, m := range []proto.Message{new(openaiv1.StreamChatCompletionResponse), new(openaiv1.CreateCompletionResponse),
			new(openaiv1.CreateEmbeddingResponse), new(openaiv1.Model)} {
			_ = fromJSON.Unmarshal(b, m)
		}
	})
}

// FuzzAppendString: any string becomes one valid JSON string that decodes to it (invalid UTF-8
// replaced).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\n\n\r\t\x00\x1f\x7f", "é😀\u2028", "\xff\xfe bad", "</script>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encoded as %s: %v", s, b, err)
		}
		if utf8.ValidString(s) && got != s {
			t.Fatalf("%q came back as %q", s, got)
		}
		if !utf8.ValidString(s) && got != strings.ToValidUTF8(got, "\ufffd") {
			t.Fatalf("invalid UTF-8 kept: %q", got)
		}
	})
}

// FuzzStructJSON: a Struct (a client's extra, tool parameters, schema) is written as JSON that
// means the same as protojson's rendering of it.
func FuzzStructJSON(f *testing.F) {
	f.Add(`{"top_k":20,"min_p":0.05,"kw":{"a":[1,"x",true,null,{}]},"big":1e300,"tiny":-5e-324}`)
	f.Add(`{}`)
	f.Add(`{"":"\u0000","é":[[[]]]}`)
	f.Fuzz(func(t *testing.T, in string) {
		s := new(structpb.Struct)
		if protojson.Unmarshal([]byte(in), s) != nil {
			return
		}
		var w jsonWriter
		if !w.object(s) {
			return // a number JSON cannot carry: rejected before anything is sent
		}
		var got, want any
		if err := json.Unmarshal(w.b, &got); err != nil {
			t.Fatalf("%s written as invalid JSON %s: %v", in, w.b, err)
		}
		ref, err := protojson.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		require.NoError(t, json.Unmarshal(ref, &want))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s written as %s, protojson says %s", in, w.b, ref)
		}
	})
}

func BenchmarkChatBody(b *testing.B) {
	req := &openaiv1.CreateChatCompletionRequest{Model: "llama", Temperature: proto.Float64(0.7), MaxTokens: proto.Int32(256),
		Messages: []*openaiv1.ChatMessage{{Role: "system", Content: proto.String("You are helpful.")},
			{Role: "user", Content: proto.String(strings.Repeat("Tell me about gateways. ", 20))}},
		Extra: &structpb.Struct{Fields: map[string]*structpb.Value{"top_k": structpb.NewNumberValue(20)}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := chatBody(req, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeChunk is the per-token cost of a stream: one chunk decoded with protojson.
func BenchmarkDecodeChunk(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-123","object":"chat.completion.chunk","created":1700000000,"model":"llama","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	m := new(openaiv1.StreamChatCompletionResponse)
	b.ReportAllocs()
	for b.Loop() {
		if eventError(data) != nil {
			b.Fatal("not an error")
		}
		if err := fromJSON.Unmarshal(data, m); err != nil {
			b.Fatal(err)
		}
	}
}
