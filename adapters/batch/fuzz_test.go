package batch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/infergate/infergate/adapters/batch/batchstate"
)

// FuzzParseInput: any input file either validates into lines that each carry a unique custom_id
// and a JSON object body naming the one model, or fails with line-numbered errors; never both,
// never a panic.
func FuzzParseInput(f *testing.F) {
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`
	f.Add(good + "\n")
	f.Add(good + "\n" + good + "\n")
	f.Add(strings.Replace(good, `"a"`, `"b"`, 1) + "\n" + good)
	f.Add("{not json\n")
	f.Add("\n\n")
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","stream":true}}`)
	f.Add(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":"{\"model\":\"m\"}"}`)
	f.Fuzz(func(t *testing.T, in string) {
		p, errs, err := parseInput(strings.NewReader(in), "/v1/chat/completions", 50, 4096)
		if err != nil {
			t.Fatalf("reading from memory failed: %v", err)
		}
		if (p == nil) == (errs == nil) {
			t.Fatalf("want lines or errors, got %v and %v", p, errs)
		}
		if errs != nil {
			if len(errs) > maxReportedErrors {
				t.Fatalf("%d errors reported", len(errs))
			}
			return
		}
		if len(p.lines) == 0 || len(p.lines) > 50 || p.model == "" {
			t.Fatalf("%d lines of model %q", len(p.lines), p.model)
		}
		seen := map[string]bool{}
		for _, l := range p.lines {
			if l.CustomID == "" || seen[l.CustomID] {
				t.Fatalf("custom_id %q empty or repeated", l.CustomID)
			}
			seen[l.CustomID] = true
			var body struct{ Model string }
			if !bytes.HasPrefix(l.Body, []byte("{")) || json.Unmarshal(l.Body, &body) != nil || body.Model != p.model {
				t.Fatalf("body %s", l.Body)
			}
		}
	})
}

// FuzzDecodeMessages: bus messages that decode satisfy what the worker and collector rely on.
func FuzzDecodeMessages(f *testing.F) {
	f.Add([]byte(`{"batch":"b","endpoint":"/v1/embeddings","model":"m","lines":[{"custom_id":"a","body":{"model":"m"}}]}`))
	f.Add([]byte(`{"batch":"b","results":[{"custom_id":"a","kind":1,"line":{"x":1}},{"custom_id":"c","kind":3}]}`))
	f.Add([]byte(`{"batch":"b","results":[{"custom_id":"a","kind":9}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := decodeChunk(b); err == nil {
			if c.Batch == "" || !endpoints[c.Endpoint] || len(c.Lines) == 0 {
				t.Fatalf("accepted %+v", c)
			}
		}
		if r, err := decodeResults(b); err == nil {
			for _, l := range r.Results {
				if l.Kind == batchstate.Skipped && len(l.Line) > 0 || l.Kind != batchstate.Skipped && !json.Valid(l.Line) {
					t.Fatalf("accepted %+v", l)
				}
			}
		}
	})
}
