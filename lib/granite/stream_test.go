package granite

import (
	"reflect"
	"strings"
	"testing"
)

// streamed feeds text to a stream in pieces of size bytes (the last one shorter) and returns
// what it let out before Close, in total, the whole parse, and the mismatch.
func streamed(p *Processor, req *ChatRequest, text string, size int) (early, total Delta, msg AssistantMessage, mismatch string) {
	s := p.ParseStream(req)
	var r, c strings.Builder
	for i := 0; i < len(text); i += size {
		d := s.Write(text[i:min(i+size, len(text))])
		r.WriteString(d.Reasoning)
		c.WriteString(d.Content)
	}
	early = Delta{Reasoning: r.String(), Content: c.String()}
	rest, msg, mismatch := s.Close("stop")
	total = Delta{Reasoning: early.Reasoning + rest.Reasoning, Content: early.Content + rest.Content}
	return early, total, msg, mismatch
}

// sameAsWhole checks what a stream of text let out against Parse's answer for it: no mismatch,
// the content whole, the reasoning whole when the whole answer has any (a thought never closed
// may have been let out as reasoning: the whole answer then says why it has none), and Close's
// parse Parse's.
func sameAsWhole(t *testing.T, p *Processor, req *ChatRequest, text string, size int) (early Delta) {
	t.Helper()
	early, total, msg, mismatch := streamed(p, req, text, size)
	want := p.Parse([]Generation{{Text: text, StopReason: "stop"}}, req)[0].NextMessage
	if mismatch != "" {
		t.Fatalf("%d-byte pieces: mismatch %s (text %.200q)", size, mismatch, text)
	}
	if msg.Content != want.Content || msg.ParseError != want.ParseError || !reflect.DeepEqual(msg.ReasoningContent, want.ReasoningContent) {
		t.Fatalf("%d-byte pieces: Close's parse differs from Parse's (text %.200q)", size, text)
	}
	if total.Content != want.Content {
		t.Fatalf("%d-byte pieces: streamed content %.300q\nwhole %.300q\n(text %.300q)", size, total.Content, want.Content, text)
	}
	switch {
	case want.ReasoningContent != nil && total.Reasoning != *want.ReasoningContent:
		t.Fatalf("%d-byte pieces: streamed reasoning %.300q, whole %.300q (text %.300q)", size, total.Reasoning, *want.ReasoningContent, text)
	case want.ReasoningContent == nil && total.Reasoning != "" && want.ParseError == "":
		t.Fatalf("%d-byte pieces: reasoning %.300q streamed, none in the whole answer, which says nothing (text %.300q)", size, total.Reasoning, text)
	}
	return early
}

func TestStreamMatchesWholeParse(t *testing.T) {
	t.Parallel()
	docs32 := []Document{{Text: "Dog info"}}
	docs33 := []Document{{Text: "Dog info", DocID: &DocID{S: "1"}}}
	think := &ChatRequest{Thinking: true}
	for _, tc := range []struct {
		name string
		v    Version
		req  *ChatRequest
		text string
		// early are what must be out before Close, whatever the piece size
		earlyReasoning, earlyContent string
	}{
		{"plain", V33, nil, "  Hello there, world.\nSecond line. ", "", "  Hello there, world.\nSecond"},
		{"plain 3.2", V32, nil, "Hello there, world.\n\nMore text ", "", "Hello there, world.\n\nMore"},
		{"3.3 thinking", V33, think, "<think>\nLet me think. 6*7=42.\n</think>\n<response>\nIt is 42, clearly.\n</response>", "Let me think. 6*7=42.", "It is 42, clearly."},
		// A later <response> would replace the answer before it: held until Close.
		{"3.3 thinking without response tags", V33, think, "<think>A b c</think>\n\nThe answer is 42.", "A b c", ""},
		// A response the model never closed (cut off by max_tokens) streams, and is the answer.
		{"3.3 response cut off", V33, think, "<think>A b c</think><response>The answer is 42", "A b c", "The answer is"},
		{"3.2 thinking", V32, think, "Here is my thought process:\nFirst, 6*7.\nHere is my response:\nForty-two it is.", "First, 6*7.", "Forty-two it"},
		// Parse prefers "Here is my thought process:" wherever it comes: held until Close.
		{"3.2 thinking Here's", V32, think, "Here's my thought process: A.\n\nHere's my response: B and C.", "", ""},
		{"3.2 citations", V32, &ChatRequest{Documents: docs32, Controls: &Controls{Citations: true, Hallucinations: true}},
			"Mad about dog! <co>1</co> More text here.\n\n# Citations:\n\n<co>1</co> Document 0: \"Dog info\"\n\n# Hallucinations:\n\n1. Risk low: Mad about dog\n\n", "", "Mad about dog!More text here."},
		{"3.3 citations", V33, &ChatRequest{Documents: docs33, Controls: &Controls{Citations: true}},
			"Mad about dog!<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|> Then more.\n\n<|start_of_plugin|>{\"id\": \"citation\"}\n\n1: \"Dog info\"<|end_of_plugin|>", "", "Mad about dog! Then more."},
		{"3.3 leaked citations", V33, nil, "An answer {\"document_id\": \"3\"} goes on.\n{\"id\": \"citation\"}\n1: \"x\"", "", "An answer goes on."},
		{"tools, no call", V33, &ChatRequest{Tools: []FunctionDefinition{{Name: "f"}}}, "  I cannot call anything here.", "", "  I cannot call anything"},
		{"tool call", V33, &ChatRequest{Tools: []FunctionDefinition{{Name: "f"}}}, `<|tool_call|>[{"name": "f", "arguments": {"a": 1}}]`, "", ""},
		{"C# and braces", V32, nil, "Use C# {like this} <b>bold</b> # not a header", "", "Use C# {like this} <b>bold</b> #"},
	} {
		p := New(tc.v)
		for _, size := range []int{1, 2, 3, 5, 16, 1 << 20} {
			early, total, msg, mismatch := streamed(p, tc.req, tc.text, size)
			if mismatch != "" {
				t.Errorf("%s/%d: mismatch %s", tc.name, size, mismatch)
			}
			want := p.Parse([]Generation{{Text: tc.text, StopReason: "stop"}}, tc.req)[0].NextMessage
			msg.ToolCalls, want.ToolCalls = nil, nil // ids are random
			if !reflect.DeepEqual(msg, want) {
				t.Errorf("%s/%d: Close's parse differs from Parse's:\n%+v\n%+v", tc.name, size, msg, want)
			}
			wr := ""
			if want.ReasoningContent != nil {
				wr = *want.ReasoningContent
			}
			if total.Reasoning != wr || total.Content != want.Content {
				t.Errorf("%s/%d: streamed %+v, whole reasoning %q content %q", tc.name, size, total, wr, want.Content)
			}
			if size < len(tc.text) && (!strings.HasPrefix(early.Reasoning, tc.earlyReasoning) || !strings.HasPrefix(early.Content, tc.earlyContent)) {
				t.Errorf("%s/%d: before Close only %+v", tc.name, size, early)
			}
		}
	}
}

// A malformed output streams what the whole answer has: a thought never closed is let out as
// reasoning, then whole as content (the whole answer's ParseError says why it has no
// reasoning); sections that do not parse come after the answer, as written.
func TestStreamMalformedIsWhole(t *testing.T) {
	t.Parallel()
	think := &ChatRequest{Thinking: true}
	_, total, msg, mismatch := streamed(New(V33), think, "<think>cut off mid-thought", 4)
	if mismatch != "" || msg.ReasoningContent != nil || msg.ParseError != errThoughtOpen ||
		total.Content != "<think>cut off mid-thought" || total.Reasoning != "cut off mid-thought" {
		t.Errorf("mismatch %q, total %+v, msg %+v", mismatch, total, msg)
	}
	big := strings.Repeat("Some words, and more words. ", 3<<20/28)
	cites := &ChatRequest{Documents: []Document{{Text: "Dog info"}}, Controls: &Controls{Citations: true, Hallucinations: true}}
	docs33 := &ChatRequest{Thinking: true, Documents: []Document{{Text: "Dog info", DocID: &DocID{S: "1"}}}, Controls: &Controls{Citations: true}}
	for _, tc := range []struct {
		name string
		v    Version
		req  *ChatRequest
		text string
	}{
		{"unclosed thought", V33, think, "<think>" + big},
		{"unclosed thought 3.2", V32, think, "Here is my thought process: " + big},
		{"unclosed response", V33, think, "<think>a</think><response>" + big},
		{"section header twice", V32, cites, "Mad about dog! <co>1</co> " + big + "\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n# Citations:\n"},
		{"header twice, plain", V32, nil, "  Mad about dog! " + big + "\n# Hallucinations:\nx\n# Hallucinations:\n"},
		{"3.3 header twice", V33, docs33, "<think>a</think><response>Mad about dog!<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|> " +
			big + "<|start_of_plugin|>{\"id\": \"citation\"}{\"id\": \"citation\"}<|end_of_plugin|></response>"},
		{"leaked section after whitespace", V33, nil, "  Hi " + big + "{\"id\": \"citation\"}"},
		{"sections past MaxOutputBytes", V32, cites, "Mad about dog! <co>1</co> " + big + big + "\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n"},
	} {
		p := New(tc.v)
		want := p.Parse([]Generation{{Text: tc.text}}, tc.req)[0].NextMessage
		if want.ParseError == "" && tc.name != "unclosed response" && tc.name != "leaked section after whitespace" {
			t.Errorf("%s: parses", tc.name)
		}
		early := sameAsWhole(t, p, tc.req, tc.text, 5)
		if len(early.Content)+len(early.Reasoning) < len(big)/2 {
			t.Errorf("%s: only %d bytes streamed before Close", tc.name, len(early.Content)+len(early.Reasoning))
		}
	}
}

// FuzzStreamParse checks the incremental parser against the whole parser for any model output:
// text built from two fuzzed parts, raw or in one of Granite's shapes (a thought and a response,
// possibly left open), under every request shape that switches a parser on (thinking, tools,
// controls), cut into fuzzed piece sizes (runes cut in two included). Nothing panics, and what
// was let out plus Close's rest is the whole answer (sameAsWhole).
func FuzzStreamParse(f *testing.F) {
	f.Add("Let me see.", "It is 42.", uint8(0), uint8(1))
	f.Add("a\n b ", " c <co>1</co> d.\n# Citations:\n<co>1</co> Document 0: \"x\"", uint8(0x18), uint8(2))
	f.Add("", "x<|start_of_cite|>{\"document_id\": \"12\"}<|end_of_cite|> y {\"id\": \"citation\"}", uint8(0x09), uint8(3))
	f.Add("Here's my response: early", "Here is my thought process: again", uint8(0x22), uint8(1))
	f.Add("é ü", "  ", uint8(0x13), uint8(7))
	f.Add("x", "[{\"name\": \"f\"}]", uint8(0x04), uint8(1))
	f.Add("x", "  <tool_call>[{\"name\": \"f\"}]", uint8(0x37), uint8(2))
	f.Add("t", "<|start_of_cite|>{\"document_<|start_of_plugin|>id\": \"1\"}<|end_of_cite|>", uint8(0x09), uint8(1))
	f.Add("", "a {\"id\": \"cit {\"document_id\": \"1\"}ation\"} b", uint8(0x01), uint8(1))
	f.Add("", "a {\"document_id\": \"123456789012345678901234567890\"} b", uint8(0x01), uint8(3))
	f.Add("", "A\u3000<co>1</co>\u3000B\u3000", uint8(0x00), uint8(1))
	f.Add("a", "</response>", uint8(0x13), uint8(4))
	f.Add("a", "b", uint8(0x33), uint8(5))
	f.Add("Here is my thought process:x", "Here is my response:y# Citations:\n<co>1</co> Document 0: \"x\"\n# Citations:", uint8(0x0a), uint8(2))
	f.Add("", "  Hi {\"id\": \"hallucination\"}", uint8(0x01), uint8(3))
	docs := []Document{{Text: "x", DocID: &DocID{S: "12"}}}
	f.Fuzz(func(t *testing.T, thought, answer string, mode, size uint8) {
		v := V32
		if mode&1 != 0 {
			v = V33
		}
		req := &ChatRequest{Thinking: mode&2 != 0}
		if mode&4 != 0 {
			req.Tools = []FunctionDefinition{{Name: "f"}}
		}
		if mode&8 != 0 {
			req.Controls, req.Documents = &Controls{Citations: true, Hallucinations: true}, docs
		}
		text := thought + answer
		switch mode >> 4 & 3 {
		case 1: // the shape a thinking model writes
			if v == V33 {
				text = "<think>" + thought + "</think><response>" + answer + "</response>"
			} else {
				text = "Here is my thought process:" + thought + "Here is my response:" + answer
			}
		case 2: // cut off in the answer; 3.2's other markers
			if v == V33 {
				text = "<think>" + thought + "</think><response>" + answer
			} else {
				text = "Here's my thought process:" + thought + "Here's my response:" + answer
			}
		case 3: // cut off in the thought
			text = New(v).startMarker() + thought + answer
		}
		sameAsWhole(t, New(v), req, text, int(size%32)+1)
	})
}

func (p *Processor) startMarker() string {
	if p.version == V33 {
		return cotStart33[0]
	}
	return cotStart32[0]
}
