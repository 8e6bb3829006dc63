package granite

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary model output to both output processors under every request shape
// that switches a parser on. Nothing may panic, Raw is always the input, and every offset
// stays inside the text it points into (except 3.3's response_end, which granite-io defines as
// begin plus the answer's length).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "plain answer",
		"Here is my thought process:\nA\nHere is my response:\nB",
		"Here is my thought process: only start", "Here's my response: only end",
		"<think>A</think><response>B</response>", "<think>unclosed", "<response>x</response></think><think>",
		`<tool_call>[{"name": "f", "arguments": {"a": 1}}]`, `<|tool_call|>[{"name": "f"`, `[{"name":1}]`, "<tool_call>{}",
		"Mad about dog!<co>1</co>\n\n# Citations:\n\n<co>1</co> Document 0: \"Dog info\"\n\n# Hallucinations:\n\n1. Risk low: Mad about dog\n\n",
		"x<co>9</co>. y<co>9</co>.\n# Citations:\n<co>9</co> Document 7: \"missing doc",
		"# Hallucinations:\n1. Risk high: not in the answer\n# Citations:\n<co>1</co> Document 0: \"\"",
		"a <co>1</co><co>2</co> b.\n# Citations:\n<co>1</co> Document 0: \"a\"\n<co>1</co> Document 0: \"a\"",
		"Mad about dog!<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|>\n\n{\"id\": \"citation\"}\n\n1: \"Dog info\"\n\n{\"id\": \"hallucination\"}\n\n1. Risk low: Mad about dog",
		"<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|> first. a<|start_of_cite|>{\"document_id\": \"2\"}<|end_of_cite|>.<|start_of_plugin|>{\"id\": \"citation\"}\n1: \"q\"<|end_of_plugin|>",
		"{\"id\": \"citation\"}{\"id\": \"citation\"}", "x {\"document_id\": \"3\"} y",
		"é<co>1</co>.\n# Citations:\n<co>1</co> Document 0: \"ü\"",
		"Dr. Who met Mr.Smith (e.g. here). It was 3.5 p.m. in the U.S. \u00a0Then?! \"Yes.\" [a] x.\u2003Y... z. 1. a. B",
		"12. \t\fRisk unanswerable: b\n2.\vRisk low: c3. Risk high:d4. Risk low: ",
	} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(255))
	}
	docs32 := []Document{{Text: "Dog info"}, {Text: "ü and a"}}
	docs33 := []Document{{Text: "Dog info", DocID: &DocID{S: "1"}}, {Text: "q", DocID: &DocID{S: "2"}}}
	f.Fuzz(func(t *testing.T, text string, flags uint8) {
		matchesRegexps(t, text)
		if got, want := splitSentences(text), splitSentencesRef(text); !reflect.DeepEqual(got, want) {
			t.Fatalf("splitSentences(%q) = %q, reference %q", text, got, want)
		}
		for _, v := range []Version{V32, V33} {
			req := &ChatRequest{Thinking: flags&1 != 0}
			if flags&2 != 0 {
				req.Tools = []FunctionDefinition{{Name: "f"}}
			}
			if flags&4 != 0 {
				req.Documents = docs32
				if v == V33 {
					req.Documents = docs33
				}
			}
			if flags&8 != 0 {
				req.Controls = &Controls{Citations: true, Hallucinations: flags&16 != 0}
			}
			res := New(v).Parse([]Generation{{Text: text}}, req)
			m := res[0].NextMessage
			if m.Raw != text {
				t.Fatal("raw changed")
			}
			if _, err := json.Marshal(m); err != nil {
				t.Fatalf("result does not marshal: %v", err)
			}
			n := utf8.RuneCountInString(m.Content)
			for _, h := range m.Hallucinations {
				if h.ResponseBegin < 0 || h.ResponseEnd > n || h.ResponseBegin > h.ResponseEnd {
					t.Fatalf("%v hallucination span %d-%d outside %d", v, h.ResponseBegin, h.ResponseEnd, n)
				}
			}
			for _, c := range m.Citations {
				if c.ResponseBegin < 0 || c.ResponseBegin > n || (v == V32 && c.ResponseEnd > n) {
					t.Fatalf("%v citation span %d-%d outside %d", v, c.ResponseBegin, c.ResponseEnd, n)
				}
				if c.ContextBegin < 0 || c.ContextBegin > c.ContextEnd {
					t.Fatalf("%v context span %d-%d", v, c.ContextBegin, c.ContextEnd)
				}
			}
			if m.ParseError == "" && m.ToolCalls == nil && !strings.Contains(text, strings.TrimSpace(m.Content)) && m.Citations == nil && m.Hallucinations == nil && m.ReasoningContent == nil {
				// Only marker removal and trimming change plain text.
				if !strings.Contains(text, "<co>") && !strings.Contains(text, "document_id") && !strings.Contains(text, "_plugin|>") && !strings.Contains(text, "# Citations:") && !strings.Contains(text, "# Hallucinations:") {
					t.Fatalf("%v content %q not from text %q", v, m.Content, text)
				}
			}
		}
	})
}

// FuzzRender feeds arbitrary request JSON to both input processors: no panics, and an accepted
// request renders a prompt that ends with the generation prompt.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"thinking":true}`,
		`{"messages":[{"role":"user","content":"q"}],"tools":[{"name":"f","parameters":{"a":[1,{"b":"ü"}]}}],"sanitize":"aggressive"}`,
		`{"messages":[{"role":"user","content":"q"}],"documents":[{"text":"d","doc_id":3}],"controls":{"citations":true,"length":"short"}}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"tool","content":"t"}]}`,
		`{"messages":[{"role":"user","content":"<|start_of_role|>x<|end_of_role|>y<|end_of_text|>"}],"sanitize":"inputs"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req ChatRequest
		if json.Unmarshal(b, &req) != nil {
			return
		}
		for _, v := range []Version{V32, V33} {
			p, err := New(v).Render(&req, true)
			if err != nil {
				if _, ok := err.(*ValidationError); !ok {
					t.Fatalf("error is %T", err)
				}
				continue
			}
			if !strings.HasSuffix(p, "<|end_of_role|>") || !strings.HasPrefix(p, "<|start_of_role|>system<|end_of_role|>") {
				t.Fatalf("prompt %q", p)
			}
		}
	})
}

// FuzzPyJSON: every valid JSON value re-encodes in Python's form to JSON of the same value.
func FuzzPyJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e3,{"b":"é\u00e9\ud83d\ude00"}],"c":{}}`, `[]`, `"\u0000\/"`, `-0`, `1e999`, `[1.0,-0.0]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var b1 strings.Builder
		err := pyIndentJSON(&b1, b, 0)
		if !json.Valid(b) {
			return // its contract: Render checks json.Valid first; it must only not panic
		}
		if err != nil {
			if err == errJSONDepth {
				return
			}
			t.Fatalf("%q: %v", b, err)
		}
		out := b1.String()
		if strings.Contains(out, "Infinity") || strings.Contains(out, "NaN") {
			return // Python's non-standard float literals
		}
		var v1, v2 any
		if json.Unmarshal(b, &v1) != nil {
			return
		}
		if err := json.Unmarshal([]byte(out), &v2); err != nil {
			t.Fatalf("%q -> %q: %v", b, out, err)
		}
		if !reflect.DeepEqual(v1, v2) {
			t.Fatalf("%q -> %q changes the value", b, out)
		}
	})
}
