package granitestage

import (
	"encoding/json"
	"testing"
)

// The hand-written delta chunk is byte for byte what encoding/json writes for it.
func TestEmitTextIsEmitChoice(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", "\x00\x1f\"\\<>&\u2028\u2029\xff\xc3 é\t\r\n", ""} {
		a := &chatStream{head: chunk{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: "g\"<",
			SystemFingerprint: json.RawMessage(`"fp"`)}}
		b := *a
		a.emitText(3, "content", s)
		text := s
		if err := b.emitChoice(chunkChoice{Index: 3, Delta: chunkDelta{Content: &text}}); err != nil {
			t.Fatal(err)
		}
		if string(a.out) != string(b.out) {
			t.Errorf("%q:\n%s\n%s", s, a.out, b.out)
		}
		a.out, b.out = nil, nil
		a.emitText(0, "reasoning_content", s)
		if err := b.emitChoice(chunkChoice{Index: 0, Delta: chunkDelta{ReasoningContent: &text}}); err != nil {
			t.Fatal(err)
		}
		if string(a.out) != string(b.out) {
			t.Errorf("%q:\n%s\n%s", s, a.out, b.out)
		}
	}
}
