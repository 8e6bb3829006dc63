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
	for i := 0; i < len(text); i += size {
		d := s.Write(text[i:min(i+size, len(text))])
		early.Reasoning += d.Reasoning
		early.Content += d.Content
	}
	rest, msg, mismatch := s.Close("stop")
	total = Delta{Reasoning: early.Reasoning + rest.Reasoning, Content: early.Content + rest.Content}
	return early, total, msg, mismatch
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
		{"3.3 thinking without response tags", V33, think, "<think>A b c</think>\n\nThe answer is 42.", "A b c", "The answer is"},
		{"3.2 thinking", V32, think, "Here is my thought process:\nFirst, 6*7.\nHere is my response:\nForty-two it is.", "First, 6*7.", "Forty-two it"},
		{"3.2 thinking Here's", V32, think, "Here's my thought process: A.\n\nHere's my response: B and C.", "A.", "B and"},
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

func TestStreamReportsMismatch(t *testing.T) {
	t.Parallel()
	// A thought the model never closes: streamed as reasoning, the whole parse has none.
	_, total, msg, mismatch := streamed(New(V33), &ChatRequest{Thinking: true}, "<think>cut off mid-thought", 4)
	if mismatch == "" || msg.ReasoningContent != nil || total.Content != "<think>cut off mid-thought" || total.Reasoning != "cut off mid-thought" {
		t.Errorf("mismatch %q, total %+v, msg %+v", mismatch, total, msg)
	}
	// A response section cut off: streamed without its tag, the whole parse keeps the tag.
	_, _, _, mismatch = streamed(New(V33), &ChatRequest{Thinking: true}, "<think>a</think><response>cut off", 4)
	if mismatch == "" {
		t.Error("unclosed response not reported")
	}
}

// FuzzStreamParse checks the incremental parser against the whole parser: text built from
// fuzzed parts in each output shape, cut into fuzzed piece sizes. Nothing panics; what was let
// out plus Close's rest is the whole parse unless Close reports a mismatch; and text whose parts
// hold no marker characters never mismatches.
func FuzzStreamParse(f *testing.F) {
	f.Add("Let me see.", "It is 42.", uint8(0), uint8(1))
	f.Add("a\n b ", " c <co>1</co> d.\n# Citations:\n<co>1</co> Document 0: \"x\"", uint8(3), uint8(2))
	f.Add("", "x<|start_of_cite|>{\"document_id\": \"12\"}<|end_of_cite|> y {\"id\": \"citation\"}", uint8(5), uint8(3))
	f.Add("Here's my response: early", "Here is my thought process: again", uint8(6), uint8(1))
	f.Add("é ü", "  ", uint8(2), uint8(7))
	f.Add("x", "[{\"name\": \"f\"}]", uint8(8), uint8(1))
	docs := []Document{{Text: "x", DocID: &DocID{S: "12"}}}
	f.Fuzz(func(t *testing.T, thought, answer string, mode, size uint8) {
		v := V32
		if mode&1 != 0 {
			v = V33
		}
		req := &ChatRequest{}
		text := answer
		switch mode >> 1 & 3 {
		case 1:
			req.Thinking = true
			if v == V33 {
				text = "<think>" + thought + "</think><response>" + answer + "</response>"
			} else {
				text = "Here is my thought process:" + thought + "Here is my response:" + answer
			}
		case 2:
			req.Controls = &Controls{Citations: true}
			if v == V33 {
				req.Documents = docs
			}
		case 3:
			req.Tools = []FunctionDefinition{{Name: "f"}}
		}
		if mode&8 != 0 {
			text = thought + text // free-form text ahead of the structure
		}
		p := New(v)
		_, total, msg, mismatch := streamed(p, req, text, int(size%32)+1)
		want := p.Parse([]Generation{{Text: text, StopReason: "stop"}}, req)[0].NextMessage
		if msg.Content != want.Content || msg.Raw != text {
			t.Fatalf("Close's parse differs: %q vs %q", msg.Content, want.Content)
		}
		if mismatch != "" {
			plain := func(s string) bool { return !strings.ContainsAny(s, "<#{[") && !strings.Contains(s, "Here") }
			if mode&8 == 0 && plain(thought) && plain(answer) && want.ParseError == "" {
				t.Fatalf("mismatch on plain parts: %s (text %q)", mismatch, text)
			}
			return
		}
		wr := ""
		if want.ReasoningContent != nil {
			wr = *want.ReasoningContent
		}
		if total.Reasoning != wr || total.Content != want.Content {
			t.Fatalf("streamed %+v, whole reasoning %q content %q (text %q)", total, wr, want.Content, text)
		}
	})
}
