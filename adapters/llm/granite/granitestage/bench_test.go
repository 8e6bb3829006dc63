package granitestage

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/pipeline"
)

var benchBody = []byte(`{"model":"granite","max_tokens":256,"temperature":0.2,"messages":[` +
	`{"role":"system","content":"You are terse."},{"role":"user","content":"What do dogs do? Tell me in two sentences, with sources."}],` +
	`"chat_template_kwargs":{"documents":[{"doc_id":1,"text":"Dogs bark at strangers and wag their tails."},{"doc_id":2,"text":"Cats meow."}],"controls":{"citations":true}}}`)

// BenchmarkDecode is the stage's decoding of a chat body (what it adds before rendering), against
// a baseline of decoding the same body into generic maps, as a stage that only reads it would.
func BenchmarkDecode(b *testing.B) {
	var base time.Duration
	b.Run("baseline_unmarshal", func(b *testing.B) {
		for b.Loop() {
			var v map[string]any
			if err := json.Unmarshal(benchBody, &v); err != nil {
				b.Fatal(err)
			}
		}
		base = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			req, err := pipeline.NewRequest(chatPath, benchBody)
			if err != nil {
				b.Fatal(err)
			}
			f, err := req.Fields()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := decode(f); err != nil {
				b.Fatal(err)
			}
		}
		if base > 0 {
			b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(base), "x_baseline")
		}
	})
}
