package chattemplate

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The golden corpus: testdata/corpus.json's requests, rendered with each template of
// testdata/templates by @huggingface/jinja (testdata/gen/gen.mjs) and checked against Python's
// Jinja2 as transformers sets it up (testdata/gen/crosscheck.py: identical on every render).

type manifestEntry struct {
	Name          string        `json:"name"`
	File          string        `json:"file"`
	BOS           *string       `json:"bos_token"`
	EOS           *string       `json:"eos_token"`
	ContentFormat ContentFormat `json:"content_format"`
}

type goldenResult struct {
	Template string  `json:"template"`
	Case     string  `json:"case"`
	Output   *string `json:"output"`
	Raise    *string `json:"raise"`
	Error    *string `json:"error"`
}

type corpus struct {
	Cases []json.RawMessage `json:"cases"`
}

// goldenNow is the clock the goldens were rendered with (gen.mjs's NOW).
var goldenNow = time.Date(2026, 1, 15, 9, 5, 7, 0, time.UTC)

var loadTestdata = sync.OnceValues(func() (*testdata, error) {
	td := &testdata{templates: map[string]*Template{}, sources: map[string]string{}, cases: map[string]json.RawMessage{}}
	b, err := os.ReadFile("testdata/templates/manifest.json")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &td.manifest); err != nil {
		return nil, err
	}
	for _, m := range td.manifest {
		src, err := os.ReadFile(filepath.Join("testdata/templates", m.File))
		if err != nil {
			return nil, err
		}
		td.sources[m.Name] = string(src)
		opts := Options{Now: func() time.Time { return goldenNow }}
		if m.BOS != nil {
			opts.BOS = *m.BOS
		}
		if m.EOS != nil {
			opts.EOS = *m.EOS
		}
		t, err := Compile(string(src), opts)
		if err != nil {
			return nil, err
		}
		td.templates[m.Name] = t
	}
	b, err = os.ReadFile("testdata/corpus.json")
	if err != nil {
		return nil, err
	}
	var c corpus
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	for _, raw := range c.Cases {
		var name struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, err
		}
		td.caseOrder = append(td.caseOrder, name.Name)
		td.cases[name.Name] = raw
	}
	f, err := os.Open("testdata/golden.json.gz")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	gb, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var g struct {
		Results []goldenResult `json:"results"`
	}
	if err := json.Unmarshal(gb, &g); err != nil {
		return nil, err
	}
	td.golden = g.Results
	return td, nil
})

type testdata struct {
	manifest  []manifestEntry
	templates map[string]*Template
	sources   map[string]string
	cases     map[string]json.RawMessage
	caseOrder []string
	golden    []goldenResult
}

func mustTestdata(tb testing.TB) *testdata {
	tb.Helper()
	td, err := loadTestdata()
	if err != nil {
		tb.Fatal(err)
	}
	return td
}

// TestGolden renders every corpus request with every template and compares with the reference
// byte for byte (a raise_exception: its message).
func TestGolden(t *testing.T) {
	td := mustTestdata(t)
	if want := len(td.manifest) * len(td.cases); len(td.golden) != want {
		t.Fatalf("%d golden results, want %d (templates x cases): regenerate testdata (testdata/gen)", len(td.golden), want)
	}
	for _, g := range td.golden {
		t.Run(g.Template+"/"+g.Case, func(t *testing.T) {
			tmpl := td.templates[g.Template]
			in, err := DecodeRequest(td.cases[g.Case])
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			out, err := tmpl.Render(context.Background(), in)
			switch {
			case g.Output != nil:
				if err != nil {
					t.Fatalf("Render: %v", err)
				}
				if out != *g.Output {
					t.Errorf("render differs from the reference at byte %d\n got: %q\nwant: %q", firstDiff(out, *g.Output), out, *g.Output)
				}
			case g.Raise != nil:
				var re *RaiseError
				if !errors.As(err, &re) {
					t.Fatalf("got %q, %v; want the template's raise_exception(%q)", out, err, *g.Raise)
				}
				if re.Message != *g.Raise {
					t.Errorf("raise_exception message %q, want %q", re.Message, *g.Raise)
				}
			default:
				if err == nil {
					t.Errorf("rendered %q; the reference failed: %s", out, *g.Error)
				}
			}
		})
	}
}

func firstDiff(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// TestContentFormatDetected checks that Compile tells vLLM's content formats apart as the
// manifest records them (gemma3 iterates a message's content; the others print it).
func TestContentFormatDetected(t *testing.T) {
	td := mustTestdata(t)
	for _, m := range td.manifest {
		if got := td.templates[m.Name].ContentFormat(); got != m.ContentFormat {
			t.Errorf("%s: content format %q, want %q", m.Name, got, m.ContentFormat)
		}
	}
}

// TestGoldenCorpusCoverage keeps the corpus covering what the issue asks for.
func TestGoldenCorpusCoverage(t *testing.T) {
	td := mustTestdata(t)
	all := strings.Join(td.caseOrder, " ")
	for _, want := range []string{"multi_turn", "tool_call_roundtrip", "parallel_tool_calls", "documents_rag",
		"enable_thinking_false", "unicode", "empty_content", "content_parts", "ends_with_assistant", "user_only_no_gen"} {
		if !strings.Contains(all, want) {
			t.Errorf("corpus lacks a %s case", want)
		}
	}
	raises := 0
	for _, g := range td.golden {
		if g.Raise != nil {
			raises++
		}
	}
	if raises == 0 {
		t.Error("no golden case exercises raise_exception")
	}
}

// TestConcurrentRenders: compiled templates are shared by concurrent requests (run with -race).
func TestConcurrentRenders(t *testing.T) {
	td := mustTestdata(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, g := range td.golden {
				if i%4 != w || g.Output == nil {
					continue
				}
				in, err := DecodeRequest(td.cases[g.Case])
				if err != nil {
					t.Error(err)
					return
				}
				segs, err := td.templates[g.Template].RenderSegments(context.Background(), in, specialTokens)
				if err != nil {
					t.Errorf("%s/%s: %v", g.Template, g.Case, err)
					return
				}
				var b strings.Builder
				for _, s := range segs {
					b.WriteString(s.Text)
				}
				if b.String() != *g.Output {
					t.Errorf("%s/%s: concurrent render differs", g.Template, g.Case)
				}
			}
		}()
	}
	wg.Wait()
}
