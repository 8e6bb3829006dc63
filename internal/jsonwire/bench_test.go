package jsonwire

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The benchmarks run on the bodies in testdata/bench: routing.json is core/pipeline's
// BenchmarkScanRouting body (1 KB), agent.json surface/anthropic's benchOpenAI (a tool call and
// its result, 1.5 KB), history.json a 40-turn agent history (80 KB: tool calls with JSON
// arguments, code and logs with quotes, tabs and newlines, French, Chinese and emoji, every
// other message written with \u escapes as Python clients send them, "model" and "stream"
// last), escaped.json one 3.4 KB string literal from it with escapes throughout.
//
// The same operations on go-json-experiment's jsontext and segmentio's encoding, which doc.go
// compares, run in a scratch module outside the repository, so that go.mod gains no
// dependency: testdata/eval holds it (each file with .txt added, so that no tool takes it for
// part of this module). To run it, copy those files to an empty folder without the .txt, point
// the replace at the repository (go mod edit -replace github.com/infergate/infergate=REPO), and
// run JSONWIRE_BENCH=REPO/internal/jsonwire/testdata/bench go test -bench . there; its
// TestValidityAgreement lists where each library's Valid parts from encoding/json's.

func benchFile(b *testing.B, name string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", "bench", name))
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// route is the request router's scan on jsonwire: validate the body, and read its top-level
// "model" and "stream" members (null leaves them unset, the last of a repeated key wins, every
// other value skipped).
func route(body []byte) (model string, stream bool, err error) {
	s := NewScanner(body, Options{})
	if err := s.EnterObject(); err != nil {
		return "", false, err
	}
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return "", false, err
		}
		if !more {
			break
		}
		k := key.Contents(body)
		if key.Flags&Escaped != 0 { // an escaped key matches its value, as encoding/json has it
			k, _ = Unescape(nil, k, ReplaceInvalid)
		}
		switch string(k) {
		case "model":
			if s.ReadNull() {
				model = ""
				break
			}
			t, err := s.ReadString()
			if err != nil {
				return "", false, err
			}
			if t.Plain() {
				model = string(t.Contents(body))
			} else if model, err = UnescapeString(t.Contents(body), ReplaceInvalid); err != nil {
				return "", false, err
			}
		case "stream":
			if s.ReadNull() {
				stream = false
			} else if stream, err = s.ReadBool(); err != nil {
				return "", false, err
			}
		default:
			if _, err := s.ReadValue(); err != nil {
				return "", false, err
			}
		}
	}
	return model, stream, s.Finish()
}

// BenchmarkRouting: validate a chat body and find its top-level "model" and "stream".
func BenchmarkRouting(b *testing.B) {
	for _, name := range []string{"routing.json", "agent.json", "history.json"} {
		body := benchFile(b, name)
		b.Run(name+"/jsonwire", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if m, _, err := route(body); err != nil || m == "" {
					b.Fatal(m, err)
				}
			}
		})
		b.Run(name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var r struct {
					Model  string `json:"model"`
					Stream bool   `json:"stream"`
				}
				if err := json.Unmarshal(body, &r); err != nil || r.Model == "" {
					b.Fatal(err)
				}
			}
		})
	}
}

// messages is the history's messages array: its bytes and where they start.
func messages(b *testing.B) []byte {
	body := benchFile(b, "history.json")
	s := NewScanner(body, Options{})
	if err := s.EnterObject(); err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.NextMember(); err != nil {
		b.Fatal(err)
	}
	t, err := s.ReadValue()
	if err != nil || t.Kind != Array {
		b.Fatal(t, err)
	}
	return t.Raw(body)
}

// BenchmarkSkipMessages: pass over (and check) the 80 KB messages array of a long history, as a
// reader does with the members it does not want. encoding/json has no skip: its Valid on the
// array's bytes stands in.
func BenchmarkSkipMessages(b *testing.B) {
	arr := messages(b)
	b.Run("jsonwire", func(b *testing.B) {
		b.SetBytes(int64(len(arr)))
		b.ReportAllocs()
		for b.Loop() {
			if end, err := SkipValue(arr, 0, Options{}); err != nil || end != len(arr) {
				b.Fatal(end, err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(arr)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(arr) {
				b.Fatal("invalid")
			}
		}
	})
}

// BenchmarkUnescape: decode a 3.4 KB string literal with escapes throughout into a reused
// buffer, and into a new string.
func BenchmarkUnescape(b *testing.B) {
	lit := benchFile(b, "escaped.json")
	contents := lit[1 : len(lit)-1]
	b.Run("jsonwire", func(b *testing.B) {
		b.SetBytes(int64(len(lit)))
		b.ReportAllocs()
		var dst []byte
		for b.Loop() {
			var err error
			if dst, err = Unescape(dst[:0], contents, ReplaceInvalid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonwire_string", func(b *testing.B) {
		b.SetBytes(int64(len(lit)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := UnescapeString(contents, ReplaceInvalid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json_string", func(b *testing.B) {
		b.SetBytes(int64(len(lit)))
		b.ReportAllocs()
		for b.Loop() {
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppendString: write a 3 KB mixed text (prose, code with quotes, tabs and newlines,
// < > &, French, Chinese, emoji) as a JSON string into a reused buffer.
func BenchmarkAppendString(b *testing.B) {
	lit := benchFile(b, "escaped.json")
	var text string
	if err := json.Unmarshal(lit, &text); err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name string
		e    Escaping
	}{{"Minimal", Minimal}, {"EncodingJSON", EncodingJSON}, {"Canonical", Canonical}, {"PythonASCII", PythonASCII}} {
		b.Run("jsonwire_"+m.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			var dst []byte
			for b.Loop() {
				dst = AppendString(dst[:0], text, m.e)
			}
		})
	}
	b.Run("encoding_json_Marshal", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(text); err != nil {
				b.Fatal(err)
			}
		}
	})
}
