package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// loadMetaspaceVariant is mistral7b's tokenizer.json as converters write it for SentencePiece
// models that are not "legacy": no normalizer, and the Metaspace pre-tokenizer prepending "▁" to
// the first stretch of text only (testdata/golden/gen.mjs makes the same edit).
func loadMetaspaceVariant() (*Tokenizer, error) {
	dir := filepath.Join("testdata", "mistral7b")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, err
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(tj, &f); err != nil {
		return nil, err
	}
	f["normalizer"] = json.RawMessage(`null`)
	f["pre_tokenizer"] = json.RawMessage(`{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true, "prepend_scheme": "first", "split": false}`)
	if tj, err = json.Marshal(f); err != nil {
		return nil, err
	}
	return Parse(tj, cj, nil)
}

// spmRoundTrip is what Decode(Encode(s)) gives for valid UTF-8 s with a SentencePiece-style
// tokenizer (and no added token recognised): the normalized text with "▁" back to spaces and the
// decoder's Strip applied. "▁" in s comes back as a space, and with Metaspace's "first" a
// leading space is lost (the tokenizers library's behaviour too).
func spmRoundTrip(tok *Tokenizer, s string) string {
	if s == "" {
		return ""
	}
	return string(tok.trimStart([]byte(strings.ReplaceAll(tok.spm.normalize(s, true), "▁", " "))))
}

// tinySPMJSON is a small SentencePiece-style tokenizer.json in Llama 2's shape: <unk>, <s>,
// </s>, the 256 byte tokens, a few characters and merges (ranks in the comments of
// TestTinySentencePiece).
func tinySPMJSON(t testing.TB) string {
	t.Helper()
	vocab := []string{`"<unk>": 0`, `"<s>": 1`, `"</s>": 2`}
	for b := range 256 {
		vocab = append(vocab, fmt.Sprintf(`"<0x%02X>": %d`, b, 3+b))
	}
	for i, tok := range []string{"▁", "h", "e", "l", "o", "w", "r", "d", "i", "a", "b", // 259..269
		"▁h", "ll", "▁he", "▁hell", "▁hello", "▁w", "▁▁", "or", "▁a"} { // 270..278
		vocab = append(vocab, fmt.Sprintf(`%q: %d`, tok, 259+i))
	}
	return `{
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": true, "byte_fallback": true,
    "vocab": {` + strings.Join(vocab, ", ") + `},
    "merges": ["▁ h", "l l", "▁h e", "▁he ll", "▁hell o", "▁ w", "▁ ▁", "o r", "▁ a"]}
}`
}

// TestTinySentencePiece: the pieces of SentencePiece-style BPE on a tokenizer small enough to
// follow by hand (the expected ids were checked with the tokenizers library's Node binding,
// tokenizers@0.23.2, on the same files).
func TestTinySentencePiece(t *testing.T) {
	base := tinySPMJSON(t)
	const (
		unk, bos, spc               = 0, 1, 259
		h, e, l, o, w, r, d, i, a   = 260, 261, 262, 263, 264, 265, 266, 267, 268
		b, spH, ll, spHe, spHell    = 269, 270, 271, 272, 273
		spHello, spW, spSp, or, spA = 274, 275, 276, 277, 278
	)
	byteTok := func(c byte) int { return 3 + int(c) }
	metaspace := func(scheme string, split bool) string {
		return strings.Replace(strings.Replace(base,
			`"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}`,
			`"normalizer": null`, 1),
			`"pre_tokenizer": null`,
			fmt.Sprintf(`"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": %q, "split": %v}`, scheme, split), 1)
	}
	for _, c := range []struct {
		name, json, text string
		opts             Options
		want             []int
		decoded          string
	}{
		// "▁hello▁world": cut before the second "▁"; "▁w" (rank 5) merges before "or" (7).
		{"words", base, "hello world", Options{}, []int{spHello, spW, or, l, d}, "hello world"},
		// "▁▁▁hi": "▁h" (rank 0) first, then the leftmost "▁▁" (6).
		{"spaces", base, "  hi", Options{}, []int{spSp, spH, i}, "  hi"},
		{"bos", base, "hi", Options{AddSpecialTokens: true}, []int{bos, spH, i}, "<s> hi"},
		// Each stretch between added tokens gets its "▁" (tokenizers' "legacy" behaviour).
		{"after a special token", base, "a<s>hi</s>", Options{ParseSpecial: true}, []int{spA, bos, spH, i, 2}, "a<s> hi</s>"},
		{"special text as text", base, "<s>", Options{}, []int{spc, byteTok('<'), byteTok('s'), byteTok('>')}, "<s>"},
		// Characters that are not tokens: their UTF-8 bytes.
		{"byte fallback", base, "é!", Options{}, []int{spc, byteTok(0xC3), byteTok(0xA9), byteTok('!')}, "é!"},
		{"invalid UTF-8", base, "a\xff", Options{}, []int{spA, byteTok(0xFF)}, "a\uFFFD"},
		{"literal ▁", base, "▁a", Options{}, []int{spSp, a}, " a"},
		// No byte fallback: the unknown token, one for a run with fuse_unk.
		{"fuse_unk", strings.Replace(base, `"byte_fallback": true`, `"byte_fallback": false`, 1), "hé€ ü", Options{}, []int{spH, unk, spc, unk}, "h<unk> <unk>"},
		{"no fuse_unk", strings.Replace(strings.Replace(base, `"byte_fallback": true`, `"byte_fallback": false`, 1), `"fuse_unk": true`, `"fuse_unk": false`, 1),
			"hé€", Options{}, []int{spH, unk, unk}, "h<unk><unk>"},
		// Metaspace: "first" prepends to the text's first stretch only, and not before a space.
		{"metaspace first", metaspace("first", false), "hi<s>hi", Options{ParseSpecial: true}, []int{spH, i, bos, h, i}, "hi<s>hi"},
		{"metaspace first, leading space", metaspace("first", false), " hi", Options{}, []int{spH, i}, "hi"},
		{"metaspace always", metaspace("always", false), "hi<s>hi", Options{ParseSpecial: true}, []int{spH, i, bos, spH, i}, "hi<s> hi"},
		{"metaspace never", metaspace("never", false), "hi a", Options{}, []int{h, i, spA}, "hi a"},
		// With split, "▁▁" cannot form: the text is cut before every "▁".
		{"metaspace split", metaspace("always", true), "a  b", Options{}, []int{spA, spc, spc, b}, "a  b"},
		{"metaspace no split", metaspace("always", false), "a  b", Options{}, []int{spA, spSp, b}, "a  b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := Parse([]byte(c.json), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids := tok.Encode(c.text, c.opts)
			if !slices.Equal(ids, c.want) {
				t.Errorf("Encode(%q) = %v, want %v", c.text, ids, c.want)
			}
			if got := tok.Decode(ids, false); got != c.decoded {
				t.Errorf("Decode %q, want %q", got, c.decoded)
			}
			if got := streamAll(tok, ids, false); got != c.decoded {
				t.Errorf("stream %q, want %q", got, c.decoded)
			}
		})
	}

	tok, err := Parse([]byte(base), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID("▁hello"); !ok || id != spHello {
		t.Errorf("TokenID(▁hello) = %d, %v", id, ok)
	}
	if id, ok := tok.TokenID("<0x0A>"); !ok || id != byteTok('\n') {
		t.Errorf("TokenID(<0x0A>) = %d, %v", id, ok)
	}
	if s := tok.TokenString(spHello); s != "▁hello" {
		t.Errorf("TokenString(%d) = %q", spHello, s)
	}
	if s := tok.TokenString(bos); s != "<s>" {
		t.Errorf("TokenString(%d) = %q", bos, s)
	}
	// Skipping special tokens leaves the first word's "▁" at the start, where Strip takes it.
	if got := tok.Decode([]int{bos, spHello, spW}, true); got != "hello w" {
		t.Errorf("Decode skipping specials: %q", got)
	}
	// A model's output continues its prompt: its first word keeps its space, as vLLM gives it.
	dec := tok.NewDecoder(true).Continuing()
	var out strings.Builder
	for range 2 { // Flush starts a new text, continuing too
		for _, id := range []int{spHello, spW, byteTok(0xC3), byteTok(0xA9)} {
			out.WriteString(dec.Add(id))
		}
		out.WriteString(dec.Flush())
	}
	if got := out.String(); got != " hello wé hello wé" {
		t.Errorf("continuing decoder: %q", got)
	}
}

// TestSentencePieceStrip: the decoder strips one space at the very start of the text only,
// wherever the tokens cut it, and the streaming decoder holds a character split over byte tokens
// until it is whole. A run of byte tokens that is not UTF-8 gives U+FFFD per maximal subpart, as
// transformers.js (the golden reference) and this package's byte-level decoding do; the tokenizers
// library gives one per byte of the whole run (E4 BD: two), which no streaming decoder could
// match without holding every run of byte tokens to its end.
func TestSentencePieceStrip(t *testing.T) {
	tok, err := Parse([]byte(tinySPMJSON(t)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const spc, spH, i, spSp = 259, 270, 267, 276
	byteTok := func(c byte) int { return 3 + int(c) }
	for _, c := range []struct {
		ids   []int
		parts []string
	}{
		{[]int{spc, spc, spH, i}, []string{"", " ", " h", "i"}},
		{[]int{spSp, spH}, []string{" ", " h"}},
		{[]int{byteTok(' '), spH}, []string{"", " h"}},
		{[]int{1, spH}, []string{"<s>", " h"}},
		// 你 is E4 BD A0: nothing until its last byte.
		{[]int{spc, byteTok(0xE4), byteTok(0xBD), byteTok(0xA0), spH}, []string{"", "", "", "你", " h"}},
		{[]int{byteTok(0xE4), byteTok(0xBD), spH}, []string{"", "", "\uFFFD h"}},
	} {
		d := tok.NewDecoder(false)
		var parts []string
		for _, id := range c.ids {
			parts = append(parts, d.Add(id))
		}
		if tail := d.Flush(); tail != "" {
			parts = append(parts, tail)
		}
		if !slices.Equal(parts, c.parts) {
			t.Errorf("%v: parts %q, want %q", c.ids, parts, c.parts)
		}
		if got, want := strings.Join(parts, ""), tok.Decode(c.ids, false); got != want {
			t.Errorf("%v: stream %q, Decode %q", c.ids, got, want)
		}
	}
	// Flush ends a text: the next one's start is stripped again.
	d := tok.NewDecoder(false)
	if got := d.Add(spH) + d.Flush() + d.Add(spH); got != "hh" {
		t.Errorf("after Flush: %q", got)
	}
}

// TestSentencePieceCuts: cutting a stretch into pieces before "▁" (metaspace.go) gives the ids of
// the whole stretch merged as one word, on every golden case; and the cut is needed for speed,
// not for the result.
func TestSentencePieceCuts(t *testing.T) {
	tok := model(t, "mistral7b")
	if tok.spm.cut != "▁" || len(tok.spm.joins) != 1 || !tok.spm.joins['▁'] {
		t.Fatalf("cut %q, joins %v: want a cut before ▁ unless after ▁", tok.spm.cut, tok.spm.joins)
	}
	if testing.Short() {
		t.Skip("loads a tokenizer of its own")
	}
	whole, err := Load(filepath.Join("testdata", "mistral7b"))
	if err != nil {
		t.Fatal(err)
	}
	whole.spm.cut = ""
	g := readGolden(t, "mistral7b")
	for _, c := range g.Cases {
		if len(c.Text) > MaxPieceBytes/2 {
			continue // the whole stretch would be chunked
		}
		if got, want := whole.Encode(c.Text, Options{ParseSpecial: true}), tok.Encode(c.Text, Options{ParseSpecial: true}); !slices.Equal(got, want) {
			t.Errorf("%.60q: uncut %v, cut %v", c.Text, clip(got), clip(want))
		}
	}
}

// TestSentencePieceStream: the streaming decoder adds up to Decode on every golden case of the
// SentencePiece-style models.
func TestSentencePieceStream(t *testing.T) {
	for _, name := range []string{"mistral7b", "mistral7b_metaspace"} {
		tok := model(t, name)
		for _, c := range readGolden(t, name).Cases {
			for _, skip := range []bool{false, true} {
				if got, want := streamAll(tok, c.IDs, skip), tok.Decode(c.IDs, skip); got != want {
					t.Errorf("%s %.60q (skip %v): stream %.60q, want %.60q", name, c.Text, skip, got, want)
				}
			}
		}
	}
}

func TestSentencePieceConfig(t *testing.T) {
	tok := model(t, "mistral7b")
	c := tok.Config()
	if c.BOSToken != "<s>" || c.BOSTokenID != 1 || c.EOSToken != "</s>" || c.EOSTokenID != 2 || c.UnkToken != "<unk>" || c.PadTokenID != -1 {
		t.Errorf("tokens: %+v", c)
	}
	if c.AddBOSToken == nil || !*c.AddBOSToken || c.ModelMaxLength != math.MaxInt || c.TokenizerClass != "LlamaTokenizer" {
		t.Errorf("add_bos %v, max %d, class %q", c.AddBOSToken, c.ModelMaxLength, c.TokenizerClass)
	}
	if ids := tok.Encode("Hello world", Options{AddSpecialTokens: true}); !slices.Equal(ids, []int{1, 22557, 1526}) {
		t.Errorf("Hello world: %v", ids)
	}
	if id, ok := tok.TokenID("▁Hello"); !ok || id != 22557 || tok.TokenString(22557) != "▁Hello" || tok.TokenString(13) != "<0x0A>" {
		t.Errorf("TokenID(▁Hello) = %d, %v; TokenString %q %q", id, ok, tok.TokenString(22557), tok.TokenString(13))
	}
	if tok.VocabSize() != 32000 || !tok.IsSpecial(2) || tok.IsSpecial(13) {
		t.Errorf("VocabSize %d, IsSpecial", tok.VocabSize())
	}
}

// TestSentencePieceLoadErrors: what SentencePiece-style BPE still does not support is refused,
// naming the field.
func TestSentencePieceLoadErrors(t *testing.T) {
	base := tinySPMJSON(t)
	for _, c := range []struct{ edit, want string }{
		{`"type": "BPE"->"type": "Unigram"`, `model.type "Unigram"`},
		{`"type": "Prepend", "prepend": "▁"->"type": "NFKC"`, `normalizer: type "NFKC" is not supported`},
		{`{"String": " "}, "content": "▁"->{"Regex": " +"}, "content": "▁"`, `normalizer: Replace: only a non-empty String pattern`},
		{`"pre_tokenizer": null->"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "sometimes"}`, `prepend_scheme "sometimes"`},
		{`"pre_tokenizer": null->"pre_tokenizer": {"type": "Metaspace", "replacement": "", "prepend_scheme": "first"}`, `replacement "" is not one character`},
		{`"pre_tokenizer": null->"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "add_prefix_space": false, "prepend_scheme": "always"}`, `contradicts`},
		{`"pre_tokenizer": null->"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "▁"}, {"type": "Digits"}]}`, `no ByteLevel step`},
		{`"decoder": {"type": "Sequence", "decoders"->"decoder": {"type": "Metaspace", "replacement": "▁", "decoders"`, `decoder: type "Metaspace" is not supported`},
		{`"start": 1, "stop": 0->"start": 1, "stop": 1`, `only stripping the start`},
		{`{"type": "Fuse"}, {"type": "Strip"->{"type": "Strip"`, `Strip: only one, after Fuse`},
		{`{"type": "ByteFallback"}, {"type": "Fuse"}->{"type": "Fuse"}, {"type": "ByteFallback"}`, `ByteFallback after Fuse`},
		{`"normalized": false, "special": true}->"normalized": true, "special": true}`, `normalized added tokens are not supported`},
		{`"content": "▁"}]}->"content": "▁▁▁▁▁▁"}]}`, `normalizer: Replace: a content more than 4 times`},
		{`"content": " "}, {"type": "ByteFallback"}->"content": "` + strings.Repeat(" ", 13) + `"}, {"type": "ByteFallback"}`, `decoder: Replace: more than 4`},
		{`"prepend": "▁"->"prepend": "▁▁▁▁▁▁"`, `Prepend: a text of more than 16 bytes`},
	} {
		from, to, _ := strings.Cut(c.edit, "->")
		if !strings.Contains(base, from) {
			t.Fatalf("%q not in the tiny tokenizer.json", from)
		}
		_, err := Parse([]byte(strings.Replace(base, from, to, 1)), nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.edit, err, c.want)
		}
	}
	// byte_fallback stays refused with a ByteLevel pre-tokenizer.
	tj := strings.Replace(string(tinyTokenizerJSON(t)), `"ignore_merges": false`, `"ignore_merges": false, "byte_fallback": true`, 1)
	if _, err := Parse([]byte(tj), nil, nil); err == nil || !strings.Contains(err.Error(), "model.byte_fallback") {
		t.Errorf("byte_fallback with ByteLevel: %v", err)
	}
}

// TestSentencePieceBadInput: bytes that are not UTF-8 come back through byte fallback, and long
// texts (one word of 2 MB, 2 MB of spaces, 10 MB of prose) take linear time and memory.
func TestSentencePieceBadInput(t *testing.T) {
	tok := model(t, "mistral7b")
	for _, s := range []string{"\xff\xfe", "a\x00b", "\xe2\x82", "caf\xc3", "\xf0\x9f\x98\x80\xf0\x9f", "\xed\xa0\x80 x", "ok\xc0\xafok", strings.Repeat("\x80", 100)} {
		ids := tok.Encode(s, Options{ParseSpecial: true})
		if got, want := tok.Decode(ids, false), string(must(appendValid(nil, []byte(spmRoundTrip(tok, s)), true))); got != want {
			t.Errorf("%q: round trip %q, want %q", s, got, want)
		}
	}
	if got := tok.Decode([]int{-1, 1 << 40, 32000, 22557}, false); got != "Hello" {
		t.Errorf("ids out of range: %q", got)
	}
	if testing.Short() {
		t.Skip("the long texts take a few seconds")
	}
	for _, c := range []struct {
		name string
		text string
	}{
		{"mixed", mixedText(10 << 20)},
		{"one word", strings.Repeat("a", 2<<20)},
		{"spaces", strings.Repeat(" ", 2<<20) + "x"},
		{"CJK", strings.Repeat("你好世界", 1<<17)},
		{"bytes", strings.Repeat("\n\U0001F9FF", 1<<18)},
	} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		ids := tok.Encode(c.text, Options{})
		dt := time.Since(t0)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes, %d ids in %v, %d MB allocated", c.name, len(c.text), len(ids), dt, alloc>>20)
		if limit := uint64(8*cap(ids) + 16*len(c.text)); alloc > limit {
			t.Errorf("%s: %d bytes allocated, more than %d", c.name, alloc, limit)
		}
		if got := tok.Decode(ids, false); got != c.text {
			t.Errorf("%s: no round trip", c.name)
		}
		if !utf8.ValidString(c.text) {
			t.Fatal("test text is not UTF-8")
		}
	}
}

// BenchmarkDecodeSentencePiece is BenchmarkDecode with Mistral 7B's tokenizer (byte tokens,
// "▁" replaced, the start stripped).
func BenchmarkDecodeSentencePiece(b *testing.B) {
	text := mixedText(1 << 20)
	tok := model(b, "mistral7b")
	ids := tok.Encode(text, Options{})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for range b.N {
			tok.Decode(ids, false)
		}
	})
	b.Run("StreamDecoder", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for range b.N {
			d := tok.NewDecoder(false)
			for _, id := range ids {
				d.Add(id)
			}
			d.Flush()
		}
	})
}
