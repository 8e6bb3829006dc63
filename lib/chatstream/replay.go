package chatstream

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/infergate/infergate/lib/openaiwire"
)

// ReplayOptions are what a replayed stream carries that the stored response does not decide.
type ReplayOptions struct {
	// ID and Created are the stream's (every chunk's) id and creation time.
	ID      string
	Created int64
	// IncludeUsage adds the closing usage chunk stream_options.include_usage asks for (with
	// the stored response's usage).
	IncludeUsage bool
}

// wholeResponse is a stored whole response of either API, as Replay reads it.
type wholeResponse struct {
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint"`
	Choices           []wholeChoice   `json:"choices"`
	Usage             json.RawMessage `json:"usage"`
}

type wholeChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	FinishReason string          `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason"`
	Message      struct {
		Role             string     `json:"role"`
		Content          *string    `json:"content"`
		ReasoningContent *string    `json:"reasoning_content"`
		ToolCalls        []ToolCall `json:"tool_calls"`
	} `json:"message"`
}

// Replay splits a whole response (the JSON a non-streamed request got) into the event datas a
// model would have streamed for it: for a chat completion, a first chunk with the role, the
// reasoning and the content a word at a time (each piece starting at a word's leading
// whitespace), each tool call whole, then a chunk with the finish_reason; for a text
// completion, the text a word at a time, then the finish_reason. Choices follow one another.
// With IncludeUsage, a last chunk carries no choices and the usage. The closing [DONE] is the
// caller's (pipeline.NewEventBody writes it).
func Replay(path string, resp []byte, o ReplayOptions) ([][]byte, error) {
	var w wholeResponse
	if err := json.Unmarshal(resp, &w); err != nil {
		return nil, fmt.Errorf("chatstream: the stored response is not a completion: %w", err)
	}
	if len(w.Choices) == 0 {
		return nil, fmt.Errorf("chatstream: the stored response has no choices")
	}
	chat := path != CompletionPath
	object := "chat.completion.chunk"
	if !chat {
		object = "text_completion"
	}
	c := openaiwire.Chunk{Header: openaiwire.Header{ID: o.ID, Object: object, Created: o.Created, Model: w.Model,
		SystemFingerprint: fingerprint(w.SystemFingerprint)}}
	var out [][]byte
	emit := func(cs ...openaiwire.ChunkChoice) {
		c.Choices = cs
		out = append(out, c.AppendJSON(nil, openaiwire.Options{}))
	}
	for _, wc := range w.Choices {
		if chat {
			role := wc.Message.Role
			if role == "" {
				role = "assistant"
			}
			empty := ""
			emit(openaiwire.ChunkChoice{Index: wc.Index, Delta: &openaiwire.Delta{Role: role, Content: &empty}})
			if r := wc.Message.ReasoningContent; r != nil {
				for _, p := range pieces(*r) {
					emit(openaiwire.ChunkChoice{Index: wc.Index, Delta: &openaiwire.Delta{ReasoningContent: &p}})
				}
			}
			if content := wc.Message.Content; content != nil {
				for _, p := range pieces(*content) {
					emit(openaiwire.ChunkChoice{Index: wc.Index, Delta: &openaiwire.Delta{Content: &p}})
				}
			}
			for i, tc := range wc.Message.ToolCalls {
				d := &openaiwire.Delta{ToolCalls: []openaiwire.ToolCallDelta{{Index: i, ID: tc.ID, Type: tc.Type, Function: tc.Function}}}
				emit(openaiwire.ChunkChoice{Index: wc.Index, Delta: d})
			}
			finish := wc.FinishReason
			emit(openaiwire.ChunkChoice{Index: wc.Index, Delta: &openaiwire.Delta{}, FinishReason: &finish, StopReason: stopReason(wc.StopReason)})
			continue
		}
		for _, p := range pieces(wc.Text) {
			emit(openaiwire.ChunkChoice{Index: wc.Index, Text: &p})
		}
		finish, empty := wc.FinishReason, ""
		emit(openaiwire.ChunkChoice{Index: wc.Index, Text: &empty, FinishReason: &finish, StopReason: stopReason(wc.StopReason)})
	}
	if o.IncludeUsage && len(w.Usage) > 0 && string(w.Usage) != "null" {
		c.Choices, c.Usage = []openaiwire.ChunkChoice{}, &openaiwire.Usage{Raw: w.Usage}
		out = append(out, c.AppendJSON(nil, openaiwire.Options{}))
	}
	return out, nil
}

// maxPiece bounds a replayed piece: a long run without whitespace (code, a URL, CJK text) is
// cut into pieces of about this many bytes, at rune boundaries, as a tokenizer would cut it.
const maxPiece = 16

// pieces cuts s where a model's tokens would plausibly end: before each whitespace run that
// precedes a word, and within long words every maxPiece bytes. The pieces join back to s.
func pieces(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		// A piece ends before whitespace that follows a non-space (the next word's lead).
		if i > start && unicode.IsSpace(r) {
			prev, _ := utf8.DecodeLastRuneInString(s[start:i])
			if !unicode.IsSpace(prev) {
				out = append(out, s[start:i])
				start = i
			}
		} else if i-start >= maxPiece {
			out = append(out, s[start:i])
			start = i
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func stopReason(r json.RawMessage) json.RawMessage {
	if string(r) == "null" {
		return nil
	}
	return r
}
