package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The models under testdata: qwen3 and cl100k (OpenAI's cl100k_base converted to a
// tokenizer.json) are committed; llama3_1 and mistral7b (SentencePiece-style BPE) are fetched by
// testdata/fetch-llama3_1.sh and fetch-mistral7b.sh (.ci/run runs them), and their tests skip
// without them unless INFERGATE_REQUIRE_TOKENIZER_DATA=1. mistral7b_metaspace is mistral7b's
// tokenizer.json with the Metaspace pre-tokenizer in place of the Prepend/Replace normalizer.
var models = []string{"qwen3", "llama3_1", "cl100k", "mistral7b", "mistral7b_metaspace"}

type loaded struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

var loadedModels = map[string]*loaded{"qwen3": {}, "llama3_1": {}, "cl100k": {}, "mistral7b": {}, "mistral7b_metaspace": {}}

// fetched names the script that fetches each model's files that are not committed.
var fetched = map[string]string{"llama3_1": "fetch-llama3_1.sh", "mistral7b": "fetch-mistral7b.sh", "mistral7b_metaspace": "fetch-mistral7b.sh"}

// model loads testdata/<name> once per test binary.
func model(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	l := loadedModels[name]
	l.once.Do(func() {
		if name == "mistral7b_metaspace" {
			l.tok, l.err = loadMetaspaceVariant()
			return
		}
		dir := filepath.Join("testdata", name)
		if _, err := os.Stat(dir); err != nil && fetched[name] != "" {
			l.err = err
			return
		}
		l.tok, l.err = Load(dir)
	})
	if l.err != nil {
		if os.IsNotExist(l.err) && os.Getenv("INFERGATE_REQUIRE_TOKENIZER_DATA") != "1" {
			tb.Skipf("testdata/%s is absent: run testdata/%s", name, fetched[name])
		}
		tb.Fatal(l.err)
	}
	return l.tok
}

type goldenCase struct {
	Text        string  `json:"text"`
	IDs         []int   `json:"ids"`
	Plain       []int   `json:"plain"`
	BOS         []int   `json:"bos"`
	Decoded     string  `json:"decoded"`
	DecodedSkip *string `json:"decoded_skip"`
}

type goldenFile struct {
	Model     string       `json:"model"`
	Reference string       `json:"reference"`
	Cases     []goldenCase `json:"cases"`
}

func readGolden(tb testing.TB, name string) goldenFile {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "golden", name+".json.gz"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var g goldenFile
	if err := json.NewDecoder(zr).Decode(&g); err != nil {
		tb.Fatal(err)
	}
	return g
}

// TestGolden compares ids and decoded text with the reference implementation's over the whole
// corpus: every case must be identical.
func TestGolden(t *testing.T) {
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			tok := model(t, name)
			g := readGolden(t, name)
			if len(g.Cases) < 500 {
				t.Fatalf("%d cases, want at least 500", len(g.Cases))
			}
			bad := 0
			fail := func(i int, format string, args ...any) {
				t.Helper()
				bad++
				if bad <= 10 {
					c := g.Cases[i]
					text := c.Text
					if len(text) > 200 {
						text = text[:200] + "..."
					}
					t.Errorf("case %d %q: "+format, append([]any{i, text}, args...)...)
				}
			}
			skipped := 0
			for i, c := range g.Cases {
				if testing.Short() && len(c.Text) > 2000 {
					skipped++ // the long texts and runs: the full suite has them
					continue
				}
				ids := tok.Encode(c.Text, Options{ParseSpecial: true})
				if !slices.Equal(ids, c.IDs) {
					fail(i, "ParseSpecial ids differ at %d:\n got  %v\n want %v", firstDiff(ids, c.IDs), clip(ids), clip(c.IDs))
				}
				if n := tok.Count(c.Text, Options{ParseSpecial: true}); n != len(c.IDs) {
					fail(i, "Count %d, want %d", n, len(c.IDs))
				}
				want := c.IDs
				if c.Plain != nil {
					want = c.Plain
				}
				if plain := tok.Encode(c.Text, Options{}); !slices.Equal(plain, want) {
					fail(i, "plain ids differ at %d:\n got  %v\n want %v", firstDiff(plain, want), clip(plain), clip(want))
				}
				if c.BOS != nil {
					if bos := tok.Encode(c.Text, Options{ParseSpecial: true, AddSpecialTokens: true}); !slices.Equal(bos, c.BOS) {
						fail(i, "AddSpecialTokens ids:\n got  %v\n want %v", clip(bos), clip(c.BOS))
					}
				}
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					fail(i, "Decode %q, want %q", clipS(got), clipS(c.Decoded))
				}
				wantSkip := c.Decoded
				if c.DecodedSkip != nil {
					wantSkip = *c.DecodedSkip
				}
				if got := tok.Decode(c.IDs, true); got != wantSkip {
					fail(i, "Decode skipping specials %q, want %q", clipS(got), clipS(wantSkip))
				}
				// Round trip: the text comes back, as the normalizer left it.
				if got, want := tok.Decode(want, false), normalized(tok, c.Text); got != want {
					fail(i, "round trip %q, want %q", clipS(got), clipS(want))
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d cases differ from %s", bad, len(g.Cases), g.Reference)
			}
			t.Logf("%d cases identical to %s (%d long ones skipped in -short)", len(g.Cases)-skipped, g.Reference, skipped)
		})
	}
}

func normalized(tok *Tokenizer, s string) string {
	if tok.spm != nil {
		return spmRoundTrip(tok, s)
	}
	if tok.norm == normNFC {
		return norm.NFC.String(s)
	}
	return s
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func clip(ids []int) []int {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}

func clipS(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// TestGoldenCatchesBrokenMerges: the golden comparison fails when merges are out of order. A
// fresh cl100k tokenizer gets the ranks of its fourth merge and of its 50,001st swapped.
func TestGoldenCatchesBrokenMerges(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a tokenizer of its own")
	}
	tok, err := Load(filepath.Join("testdata", "cl100k"))
	if err != nil {
		t.Fatal(err)
	}
	pairOf := func(rank uint32) (a, b int32) {
		for _, s := range tok.merges.slots {
			if s != 0 && uint32(s&(1<<rankBits-1)) == rank {
				pair := s>>rankBits - 1
				return int32(pair >> idBits), int32(pair & (1<<idBits - 1))
			}
		}
		t.Fatalf("no merge of rank %d", rank)
		return
	}
	const r1, r2 = 3, 50000
	a1, b1 := pairOf(r1)
	a2, b2 := pairOf(r2)
	m1, m2 := tok.merges.into[r1], tok.merges.into[r2]
	tok.merges.put(a1, b1, r2, m1) // put overwrites a pair's slot in place
	tok.merges.put(a2, b2, r1, m2)
	tok.cache = &pieceCache{seed: tok.cache.seed}
	tok.computeWholeTokens()
	g := readGolden(t, "cl100k")
	differ := 0
	for _, c := range g.Cases {
		if !slices.Equal(tok.Encode(c.Text, Options{ParseSpecial: true}), c.IDs) {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("merges out of order went unnoticed")
	}
	t.Logf("merges %q+%q and %q+%q swapped: %d of %d cases differ", tok.texts.get(int(a1)), tok.texts.get(int(b1)), tok.texts.get(int(a2)), tok.texts.get(int(b2)), differ, len(g.Cases))
}
