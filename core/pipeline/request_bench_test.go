package pipeline

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/infergate/infergate/lib/openaiwire"
)

// BenchmarkRequest: a request's life in the pipeline on internal/jsonwire's 1 KB chat body and
// 80 KB history. no_stage is a model without stages (NewRequest, then the body upstream);
// edit_body a stage's rewrite as EditBody and SetBody (a session's turn: messages set,
// session_id dropped), then the body upstream; edit the same rewrite through the view (Wire,
// Edit), encoded once by Body.
func BenchmarkRequest(b *testing.B) {
	stages := []struct {
		name  string
		stage func(r *Request) error
	}{
		{"no_stage", func(*Request) error { return nil }},
		{"edit_body", func(r *Request) error {
			f, err := r.Fields()
			if err != nil {
				return err
			}
			edited, err := r.EditBody(map[string]json.RawMessage{"messages": f["messages"]}, "session_id")
			if err != nil {
				return err
			}
			return r.SetBody(edited)
		}},
		{"edit", func(r *Request) error {
			w, err := r.Wire()
			if err != nil {
				return err
			}
			msgs, _ := w.Get("messages")
			return r.Edit(func(w *openaiwire.Body) error {
				w.Set("messages", msgs)
				w.Drop("session_id")
				return nil
			})
		}},
	}
	for _, name := range []string{"routing.json", "history.json"} {
		body, err := os.ReadFile(filepath.Join("..", "..", "internal", "jsonwire", "testdata", "bench", name))
		if err != nil {
			b.Skip(err) // the bodies are internal/jsonwire's
		}
		for _, s := range stages {
			b.Run(name+"/"+s.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					r, err := NewRequest("/v1/chat/completions", body)
					if err != nil {
						b.Fatal(err)
					}
					if err := s.stage(r); err != nil || len(r.Body()) == 0 {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
