package openai

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/lib/tensor"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Requests of OpenAIService become OpenAI JSON bodies by appending to one buffer, field by field:
// no reflection, and the checks that give clients a clear INVALID_ARGUMENT run in the same pass.

// chatBody is the JSON body of a chat completion request.
func chatBody(r *openaiv1.CreateChatCompletionRequest, stream bool) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	if stream {
		w.key("stream")
		w.raw("true")
	}
	if len(r.GetMessages()) == 0 {
		w.invalid("messages", "messages must contain at least one message")
	}
	w.key("messages")
	w.begin('[')
	for i, m := range r.GetMessages() {
		w.elem()
		w.chatMessage(i, m)
	}
	w.end(']')
	w.nonNegative("temperature", r.Temperature)
	w.unitInterval("top_p", r.TopP)
	w.atLeast("n", r.N, 1)
	w.atLeast("max_tokens", r.MaxTokens, 1)
	w.atLeast("max_completion_tokens", r.MaxCompletionTokens, 1)
	w.strings("stop", r.GetStop())
	w.penalty("presence_penalty", r.PresencePenalty)
	w.penalty("frequency_penalty", r.FrequencyPenalty)
	w.optInt64("seed", r.Seed)
	w.logitBias(r.GetLogitBias())
	w.optBool("logprobs", r.Logprobs)
	w.atLeast("top_logprobs", r.TopLogprobs, 0)
	w.nonEmpty("user", r.GetUser())
	if len(r.GetTools()) > 0 {
		w.key("tools")
		w.begin('[')
		for i, t := range r.GetTools() {
			w.elem()
			w.tool(i, t)
		}
		w.end(']')
	}
	if tc := r.GetToolChoice(); tc != nil {
		w.toolChoice(tc)
	}
	if rf := r.GetResponseFormat(); rf != nil {
		w.responseFormat(rf)
	}
	w.streamOptions(r.GetStreamOptions(), stream, "StreamChatCompletion")
	w.optBool("parallel_tool_calls", r.ParallelToolCalls)
	w.nonEmpty("reasoning_effort", r.GetReasoningEffort())
	w.extra(r.GetExtra())
	w.end('}')
	return w.result()
}

// completionBody is the JSON body of a (legacy) completion request.
func completionBody(r *openaiv1.CreateCompletionRequest, stream bool) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	if stream {
		w.key("stream")
		w.raw("true")
	}
	w.textOrTokens("prompt", r.GetPrompt(), "prompt_token_ids", r.GetPromptTokenIds())
	w.atLeast("best_of", r.BestOf, 1)
	w.optBool("echo", r.Echo)
	w.penalty("frequency_penalty", r.FrequencyPenalty)
	w.logitBias(r.GetLogitBias())
	w.atLeast("logprobs", r.Logprobs, 0)
	w.atLeast("max_tokens", r.MaxTokens, 0) // 0 with echo scores a prompt without generating
	w.atLeast("n", r.N, 1)
	w.penalty("presence_penalty", r.PresencePenalty)
	w.optInt64("seed", r.Seed)
	w.strings("stop", r.GetStop())
	w.streamOptions(r.GetStreamOptions(), stream, "StreamCompletion")
	if r.Suffix != nil {
		w.str("suffix", *r.Suffix)
	}
	w.nonNegative("temperature", r.Temperature)
	w.unitInterval("top_p", r.TopP)
	w.nonEmpty("user", r.GetUser())
	w.extra(r.GetExtra())
	w.end('}')
	return w.result()
}

// embeddingBody is the JSON body of an embedding request.
func embeddingBody(r *openaiv1.CreateEmbeddingRequest) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	w.textOrTokens("input", r.GetInput(), "input_token_ids", r.GetInputTokenIds())
	switch r.GetEncodingFormat() {
	case "", "float":
		// Always asked for: responses carry floats, whatever the upstream's default.
		w.str("encoding_format", "float")
	default:
		w.invalid("encoding_format", fmt.Sprintf("encoding_format must be \"float\" (or empty), not %q: embeddings are returned as floats", r.GetEncodingFormat()))
	}
	w.atLeast("dimensions", r.Dimensions, 1)
	w.nonEmpty("user", r.GetUser())
	w.extra(r.GetExtra())
	w.end('}')
	return w.result()
}

// tokenizeBody is the JSON body of vLLM's POST /tokenize: the completion form (prompt) or the chat
// form (messages, tools, chat_template_kwargs); the endpoint tells a prompt and messages both
// given, or neither, apart itself.
func tokenizeBody(r *openaiv1.TokenizeRequest) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	if r.Prompt != nil {
		w.str("prompt", *r.Prompt)
	}
	if len(r.GetMessages()) > 0 {
		w.key("messages")
		w.begin('[')
		for i, m := range r.GetMessages() {
			w.elem()
			w.chatMessage(i, m)
		}
		w.end(']')
	}
	if len(r.GetTools()) > 0 {
		w.key("tools")
		w.begin('[')
		for i, t := range r.GetTools() {
			w.elem()
			w.tool(i, t)
		}
		w.end(']')
	}
	w.optBool("add_special_tokens", r.AddSpecialTokens)
	w.optBool("add_generation_prompt", r.AddGenerationPrompt)
	w.optBool("continue_final_message", r.ContinueFinalMessage)
	if kw := r.GetChatTemplateKwargs(); kw != nil {
		w.key("chat_template_kwargs")
		if !w.object(kw) {
			w.notFinite("chat_template_kwargs")
		}
	}
	if r.GetReturnTokenStrs() {
		w.key("return_token_strs")
		w.bool(true)
	}
	w.end('}')
	return w.result()
}

// detokenizeBody is the JSON body of vLLM's POST /detokenize.
func detokenizeBody(r *openaiv1.DetokenizeRequest) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	w.key("tokens")
	w.ints(r.GetTokens())
	w.end('}')
	return w.result()
}

func (w *jsonWriter) model(m string) {
	if m == "" {
		w.invalid("model", "you must provide a model parameter")
	}
	w.str("model", m)
}

func (w *jsonWriter) chatMessage(i int, m *openaiv1.ChatMessage) {
	w.begin('{')
	if m.GetRole() == "" {
		w.invalid("messages", fmt.Sprintf("messages[%d].role is required", i))
	}
	w.str("role", m.GetRole())
	switch {
	case m.Content != nil && len(m.GetContentParts()) > 0:
		w.invalid("messages", fmt.Sprintf("messages[%d] sets both content and content_parts; set one", i))
	case m.Content != nil:
		w.str("content", *m.Content)
	case len(m.GetContentParts()) > 0:
		w.key("content")
		w.begin('[')
		for j, p := range m.GetContentParts() {
			w.elem()
			w.contentPart(i, j, p)
		}
		w.end(']')
	}
	w.nonEmpty("name", m.GetName())
	if len(m.GetToolCalls()) > 0 {
		w.key("tool_calls")
		w.begin('[')
		for j, tc := range m.GetToolCalls() {
			w.elem()
			w.toolCall(i, j, tc)
		}
		w.end(']')
	}
	w.nonEmpty("tool_call_id", m.GetToolCallId())
	w.end('}')
}

func (w *jsonWriter) contentPart(i, j int, p *openaiv1.ContentPart) {
	switch part := p.GetPart().(type) {
	case *openaiv1.ContentPart_Text:
		w.begin('{')
		w.str("type", "text")
		w.str("text", part.Text)
		w.end('}')
	case *openaiv1.ContentPart_ImageUrl:
		if part.ImageUrl.GetUrl() == "" {
			w.invalid("messages", fmt.Sprintf("messages[%d].content_parts[%d].image_url.url is required", i, j))
		}
		w.begin('{')
		w.str("type", "image_url")
		w.key("image_url")
		w.begin('{')
		w.str("url", part.ImageUrl.GetUrl())
		w.nonEmpty("detail", part.ImageUrl.GetDetail())
		w.end('}')
		w.end('}')
	case *openaiv1.ContentPart_Other:
		if _, ok := part.Other.GetFields()["type"].GetKind().(*structpb.Value_StringValue); !ok {
			w.invalid("messages", fmt.Sprintf("messages[%d].content_parts[%d].other needs a \"type\" string", i, j))
		}
		if !w.object(part.Other) {
			w.notFinite(fmt.Sprintf("messages[%d].content_parts[%d].other", i, j))
		}
	default:
		w.invalid("messages", fmt.Sprintf("messages[%d].content_parts[%d] is empty: set text, image_url or other", i, j))
	}
}

func (w *jsonWriter) toolCall(i, j int, tc *openaiv1.ToolCall) {
	if tc.GetFunction() == nil {
		w.invalid("messages", fmt.Sprintf("messages[%d].tool_calls[%d].function is required", i, j))
	}
	w.begin('{')
	w.nonEmpty("id", tc.GetId())
	w.str("type", orFunction(tc.GetType()))
	w.key("function")
	w.begin('{')
	w.str("name", tc.GetFunction().GetName())
	w.str("arguments", tc.GetFunction().GetArguments())
	w.end('}')
	w.end('}')
}

func orFunction(t string) string {
	if t == "" {
		return "function"
	}
	return t
}

func (w *jsonWriter) tool(i int, t *openaiv1.Tool) {
	f := t.GetFunction()
	if f.GetName() == "" {
		w.invalid("tools", fmt.Sprintf("tools[%d].function.name is required", i))
	}
	w.begin('{')
	w.str("type", orFunction(t.GetType()))
	w.key("function")
	w.begin('{')
	w.str("name", f.GetName())
	w.nonEmpty("description", f.GetDescription())
	if f.GetParameters() != nil {
		w.key("parameters")
		if !w.object(f.GetParameters()) {
			w.notFinite(fmt.Sprintf("tools[%d].function.parameters", i))
		}
	}
	w.optBool("strict", f.Strict)
	w.end('}')
	w.end('}')
}

func (w *jsonWriter) toolChoice(tc *openaiv1.ToolChoice) {
	switch c := tc.GetChoice().(type) {
	case *openaiv1.ToolChoice_Mode:
		if c.Mode == "" {
			w.invalid("tool_choice", "tool_choice.mode is empty: use none, auto or required")
		}
		w.str("tool_choice", c.Mode)
	case *openaiv1.ToolChoice_FunctionName:
		if c.FunctionName == "" {
			w.invalid("tool_choice", "tool_choice.function_name is empty")
		}
		w.key("tool_choice")
		w.begin('{')
		w.str("type", "function")
		w.key("function")
		w.begin('{')
		w.str("name", c.FunctionName)
		w.end('}')
		w.end('}')
	default:
		w.invalid("tool_choice", "tool_choice is empty: set mode or function_name")
	}
}

func (w *jsonWriter) responseFormat(rf *openaiv1.ResponseFormat) {
	if rf.GetType() == "" {
		w.invalid("response_format", "response_format.type is required")
	}
	w.key("response_format")
	w.begin('{')
	w.str("type", rf.GetType())
	js := rf.GetJsonSchema()
	if rf.GetType() == "json_schema" && js == nil {
		w.invalid("response_format", "response_format.json_schema is required when type is json_schema")
	}
	if js != nil {
		if js.GetName() == "" {
			w.invalid("response_format", "response_format.json_schema.name is required")
		}
		w.key("json_schema")
		w.begin('{')
		w.str("name", js.GetName())
		w.nonEmpty("description", js.GetDescription())
		if js.GetSchema() != nil {
			w.key("schema")
			if !w.object(js.GetSchema()) {
				w.notFinite("response_format.json_schema.schema")
			}
		}
		w.optBool("strict", js.Strict)
		w.end('}')
	}
	w.end('}')
}

func (w *jsonWriter) streamOptions(so *openaiv1.StreamOptions, stream bool, rpc string) {
	if so == nil {
		return
	}
	if !stream {
		w.invalid("stream_options", "stream_options is only allowed when streaming: call "+rpc)
		return
	}
	w.key("stream_options")
	w.begin('{')
	w.key("include_usage")
	w.bool(so.GetIncludeUsage())
	w.optBool("continuous_usage_stats", so.ContinuousUsageStats)
	w.end('}')
}

// textOrTokens writes a prompt or an embedding input: one string as a string, several as an array;
// one token list as a flat array, several as an array of arrays.
func (w *jsonWriter) textOrTokens(key string, texts []string, tokensField string, tokens []*openaiv1.TokenIds) {
	switch {
	case len(texts) > 0 && len(tokens) > 0:
		w.invalid(key, fmt.Sprintf("set %s or %s, not both", key, tokensField))
	case len(texts) == 1:
		w.str(key, texts[0])
	case len(texts) > 1:
		w.strings(key, texts)
	case len(tokens) == 1:
		w.key(key)
		w.ints(tokens[0].GetIds())
	case len(tokens) > 1:
		w.key(key)
		w.begin('[')
		for _, t := range tokens {
			w.elem()
			w.ints(t.GetIds())
		}
		w.end(']')
	default:
		w.invalid(key, fmt.Sprintf("%s is required (or %s)", key, tokensField))
	}
}

func (w *jsonWriter) logitBias(m map[int32]float64) {
	if len(m) == 0 {
		return
	}
	w.key("logit_bias")
	w.begin('{')
	for _, id := range slices.Sorted(maps.Keys(m)) {
		v := m[id]
		if !(v >= -100 && v <= 100) {
			w.invalid("logit_bias", fmt.Sprintf("logit_bias[%d] is %v; biases lie between -100 and 100", id, v))
		}
		if !w.first {
			w.b = append(w.b, ',')
		}
		w.first = false
		w.b = append(w.b, '"')
		w.b = strconv.AppendInt(w.b, int64(id), 10)
		w.b = append(w.b, '"', ':')
		w.float(v)
	}
	w.end('}')
}

// extra merges a request's extra keys into the top-level object, sorted, after the typed fields.
func (w *jsonWriter) extra(s *structpb.Struct) {
	if len(s.GetFields()) == 0 {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		switch {
		case k == "stream":
			w.invalid("extra", `extra must not set "stream": call the Stream RPC to stream`)
		case slices.Contains(w.top, k):
			w.invalid("extra", fmt.Sprintf("extra sets %q, which a field of the request sets too; set it once", k))
		}
		w.key(k)
		if !w.value(s.GetFields()[k]) {
			w.notFinite("extra." + k)
		}
	}
}

// jsonWriter appends JSON to b. The first validation failure sticks and is what result returns.
type jsonWriter struct {
	b     []byte
	first bool // the innermost object or array has no member yet
	depth int
	top   []string // the top-level keys written so far
	err   *rpcError
}

// newJSONWriter sizes the buffer from the request's protobuf size, which its JSON rarely exceeds
// by much: a large prompt or base64 image is then copied once.
func newJSONWriter(m proto.Message) *jsonWriter {
	n := proto.Size(m)
	return &jsonWriter{b: make([]byte, 0, n+n/8+256), top: make([]string, 0, 24)}
}

func (w *jsonWriter) result() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.b, nil
}

func (w *jsonWriter) invalid(param, msg string) {
	if w.err == nil {
		w.err = invalidArgument(param, msg)
	}
}

func (w *jsonWriter) notFinite(field string) {
	w.invalid(field, field+" holds a number JSON cannot carry (NaN or infinity)")
}

func (w *jsonWriter) begin(c byte) {
	w.b = append(w.b, c)
	w.first = true
	w.depth++
}

func (w *jsonWriter) end(c byte) {
	w.b = append(w.b, c)
	w.first = false
	w.depth--
}

// key starts an object member.
func (w *jsonWriter) key(k string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	if w.depth == 1 {
		w.top = append(w.top, k)
	}
	w.b = appendString(w.b, k)
	w.b = append(w.b, ':')
}

// elem starts an array element.
func (w *jsonWriter) elem() {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
}

func (w *jsonWriter) raw(s string) { w.b = append(w.b, s...) }

func (w *jsonWriter) bool(v bool) { w.b = strconv.AppendBool(w.b, v) }

func (w *jsonWriter) str(k, v string) {
	w.key(k)
	w.b = appendString(w.b, v)
}

func (w *jsonWriter) nonEmpty(k, v string) {
	if v != "" {
		w.str(k, v)
	}
}

func (w *jsonWriter) optBool(k string, v *bool) {
	if v != nil {
		w.key(k)
		w.bool(*v)
	}
}

func (w *jsonWriter) optInt64(k string, v *int64) {
	if v != nil {
		w.key(k)
		w.b = strconv.AppendInt(w.b, *v, 10)
	}
}

func (w *jsonWriter) atLeast(k string, v *int32, lo int32) {
	if v == nil {
		return
	}
	if *v < lo {
		w.invalid(k, fmt.Sprintf("%s must be at least %d, not %d", k, lo, *v))
	}
	w.key(k)
	w.b = strconv.AppendInt(w.b, int64(*v), 10)
}

func (w *jsonWriter) nonNegative(k string, v *float64) {
	if v != nil && !(*v >= 0 && !math.IsInf(*v, 1)) {
		w.invalid(k, fmt.Sprintf("%s must be a finite number, 0 or more, not %v", k, *v))
	}
	w.optFloat(k, v)
}

func (w *jsonWriter) unitInterval(k string, v *float64) {
	if v != nil && !(*v >= 0 && *v <= 1) {
		w.invalid(k, fmt.Sprintf("%s must lie between 0 and 1, not %v", k, *v))
	}
	w.optFloat(k, v)
}

func (w *jsonWriter) penalty(k string, v *float64) {
	if v != nil && !(*v >= -2 && *v <= 2) {
		w.invalid(k, fmt.Sprintf("%s must lie between -2 and 2, not %v", k, *v))
	}
	w.optFloat(k, v)
}

func (w *jsonWriter) optFloat(k string, v *float64) {
	if v != nil {
		w.key(k)
		w.float(*v)
	}
}

// float appends a finite number (callers check); NaN and infinities, which JSON has no words
// for, become null should one slip through, so the body stays valid JSON.
func (w *jsonWriter) float(v float64) {
	w.b = appendFloat(w.b, v)
}

func (w *jsonWriter) strings(k string, vs []string) {
	if len(vs) == 0 {
		return
	}
	w.key(k)
	w.begin('[')
	for _, s := range vs {
		w.elem()
		w.b = appendString(w.b, s)
	}
	w.end(']')
}

func (w *jsonWriter) ints(vs []int32) {
	w.begin('[')
	for _, v := range vs {
		w.elem()
		w.b = strconv.AppendInt(w.b, int64(v), 10)
	}
	w.end(']')
}

// object appends a Struct as a JSON object with sorted keys; false if it holds a number JSON
// cannot carry (written as null).
func (w *jsonWriter) object(s *structpb.Struct) bool {
	ok := true
	w.begin('{')
	fields := s.GetFields()
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		w.key(k)
		ok = w.value(fields[k]) && ok
	}
	w.end('}')
	return ok
}

func (w *jsonWriter) value(v *structpb.Value) bool {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		w.float(k.NumberValue)
		return !math.IsNaN(k.NumberValue) && !math.IsInf(k.NumberValue, 0)
	case *structpb.Value_StringValue:
		w.b = appendString(w.b, k.StringValue)
	case *structpb.Value_BoolValue:
		w.bool(k.BoolValue)
	case *structpb.Value_StructValue:
		return w.object(k.StructValue)
	case *structpb.Value_ListValue:
		ok := true
		w.begin('[')
		for _, e := range k.ListValue.GetValues() {
			w.elem()
			ok = w.value(e) && ok
		}
		w.end(']')
		return ok
	default: // null, or a Value with no kind set
		w.raw("null")
	}
	return true
}

// appendFloat writes v as a JSON number: plain decimals for everyday magnitudes, exponent form
// for very small or large ones (both valid JSON), null for what JSON cannot carry.
func appendFloat(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		return strconv.AppendFloat(b, v, 'e', -1, 64)
	}
	return strconv.AppendFloat(b, v, 'f', -1, 64)
}

// appendString writes s as a JSON string: quotes, backslashes and control characters escaped,
// invalid UTF-8 replaced by U+FFFD, everything else as is.
func appendString(b []byte, s string) []byte { return tensor.AppendJSONString(b, s) }

// responsesBody is the JSON body of a Responses API request (POST /v1/responses).
func responsesBody(r *openaiv1.CreateResponseRequest, stream bool) ([]byte, error) {
	w := newJSONWriter(r)
	w.begin('{')
	w.model(r.GetModel())
	if stream {
		w.key("stream")
		w.raw("true")
	}
	if v := r.GetInput(); v != nil {
		w.key("input")
		if !w.value(v) {
			w.notFinite("input")
		}
	}
	if r.Instructions != nil {
		w.str("instructions", r.GetInstructions())
	}
	w.nonEmpty("previous_response_id", r.GetPreviousResponseId())
	w.optBool("store", r.Store)
	if len(r.GetTools()) > 0 {
		w.key("tools")
		w.begin('[')
		for i, t := range r.GetTools() {
			w.elem()
			if !w.object(t) {
				w.notFinite(fmt.Sprintf("tools[%d]", i))
			}
		}
		w.end(']')
	}
	for _, f := range []struct {
		key string
		v   *structpb.Value
	}{{"tool_choice", r.GetToolChoice()}, {"text", structValue(r.GetText())}, {"reasoning", structValue(r.GetReasoning())}} {
		if f.v != nil {
			w.key(f.key)
			if !w.value(f.v) {
				w.notFinite(f.key)
			}
		}
	}
	w.atLeast("max_output_tokens", r.MaxOutputTokens, 1)
	w.nonNegative("temperature", r.Temperature)
	w.unitInterval("top_p", r.TopP)
	w.optBool("parallel_tool_calls", r.ParallelToolCalls)
	if md := r.GetMetadata(); len(md) > 0 {
		w.key("metadata")
		w.begin('{')
		for _, k := range slices.Sorted(maps.Keys(md)) {
			w.str(k, md[k])
		}
		w.end('}')
	}
	w.nonEmpty("user", r.GetUser())
	w.extra(r.GetExtra())
	w.end('}')
	return w.result()
}

// structValue is s as a Value; nil for nil.
func structValue(s *structpb.Struct) *structpb.Value {
	if s == nil {
		return nil
	}
	return structpb.NewStructValue(s)
}
