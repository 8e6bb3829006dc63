package tokenizer

import (
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

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

func TestConfig(t *testing.T) {
	q := model(t, "qwen3")
	c := q.Config()
	if c.EOSToken != "<|im_end|>" || c.EOSTokenID != 151645 || c.PadToken != "<|endoftext|>" || c.PadTokenID != 151643 {
		t.Errorf("qwen3 tokens: %+v", c)
	}
	if c.BOSToken != "" || c.BOSTokenID != -1 || c.AddBOSToken == nil || *c.AddBOSToken {
		t.Errorf("qwen3 BOS: %q %d %v", c.BOSToken, c.BOSTokenID, c.AddBOSToken)
	}
	if c.ModelMaxLength != 131072 || !slices.Equal(c.EOSTokenIDs, []int{151645}) || c.TokenizerClass != "Qwen2Tokenizer" {
		t.Errorf("qwen3: max %d, eos ids %v, class %q", c.ModelMaxLength, c.EOSTokenIDs, c.TokenizerClass)
	}
	if !strings.Contains(c.ChatTemplate, "<|im_start|>") {
		t.Errorf("qwen3 chat template: %.100q", c.ChatTemplate)
	}

	l := model(t, "llama3_1")
	c = l.Config()
	if c.BOSToken != "<|begin_of_text|>" || c.BOSTokenID != 128000 || c.EOSToken != "<|eot_id|>" || c.EOSTokenID != 128009 {
		t.Errorf("llama3_1 tokens: %+v", c)
	}
	if c.ModelMaxLength != math.MaxInt || !c.CleanUpTokenizationSpaces || !strings.Contains(c.ChatTemplate, "<|start_header_id|>") {
		t.Errorf("llama3_1: max %d, cleanup %v, template %.100q", c.ModelMaxLength, c.CleanUpTokenizationSpaces, c.ChatTemplate)
	}
}

// TestConfigFiles: generation_config.json's eos_token_id (a list), chat_template as a list of
// named templates, tokens as AddedToken objects, and chat_template.jinja.
func TestConfigFiles(t *testing.T) {
	tj := tinyTokenizerJSON(t)
	tok, err := Parse(tj, []byte(`{"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
		"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
		"model_max_length": 2048}`), []byte(`{"eos_token_id": [301, 302]}`))
	if err != nil {
		t.Fatal(err)
	}
	c := tok.Config()
	if c.BOSToken != "<s>" || c.BOSTokenID != 300 || c.EOSToken != "</s>" || c.EOSTokenID != 301 || !slices.Equal(c.EOSTokenIDs, []int{301, 302}) {
		t.Errorf("tokens: %+v", c)
	}
	if c.ChatTemplate != "D" || c.ChatTemplates["tool_use"] != "T" || c.ModelMaxLength != 2048 {
		t.Errorf("templates: %q %v, max %d", c.ChatTemplate, c.ChatTemplates, c.ModelMaxLength)
	}
	if tok, err = Parse(tj, nil, []byte(`{"eos_token_id": 301}`)); err != nil || !slices.Equal(tok.Config().EOSTokenIDs, []int{301}) {
		t.Errorf("one eos_token_id: %v %v", err, tok.Config().EOSTokenIDs)
	}

	dir := t.TempDir()
	for name, data := range map[string]string{"tokenizer.json": string(tj), "chat_template.jinja": "{{ messages }}"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if tok, err = Load(dir); err != nil || tok.Config().ChatTemplate != "{{ messages }}" {
		t.Errorf("chat_template.jinja: %v %q", err, tok.Config().ChatTemplate)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")) {
		t.Errorf("missing file: %v", err)
	}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", `{"model": `)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "tokenizer.json")+": ") {
		t.Errorf("truncated JSON: %v", err)
	}
	write("tokenizer.json", string(tinyTokenizerJSON(t)))
	write("tokenizer_config.json", `{"chat_template": 7}`)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json: chat_template") {
		t.Errorf("bad chat_template: %v", err)
	}
	write("tokenizer_config.json", `{}`)
	write("generation_config.json", `{"eos_token_id": "x"}`)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "generation_config.json") {
		t.Errorf("bad generation_config.json: %v", err)
	}

	for _, c := range []struct{ edit, want string }{
		{`"type": "BPE"->"type": "Unigram"`, `model.type "Unigram"`},
		{`"ĠĠ": 258->"ĠĠ": 99999999`, "out of range"},
		{`["Ġ", "Ġ"]->["Ġ", "xyz"]`, `token "xyz" is not in the vocabulary`},
		{`"type": "NFC"->"type": "Lowercase"`, `normalizer: type "Lowercase"`},
		{`"decoder": {"type": "ByteLevel"}->"decoder": {"type": "Metaspace"}`, `decoder: type "Metaspace"`},
		{`\\p{N}{1,3}->\\d+`, "is not one this package knows"},
		{`{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}->{"type": "Split", "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated"}`, "no ByteLevel step"},
	} {
		from, to, _ := strings.Cut(c.edit, "->")
		tj := string(tinyTokenizerJSON(t))
		if !strings.Contains(tj, from) {
			t.Fatalf("%q not in the tiny tokenizer.json", from)
		}
		_, err := Parse([]byte(strings.Replace(tj, from, to, 1)), nil, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.edit, err, c.want)
		}
	}
}

func TestTokenID(t *testing.T) {
	q := model(t, "qwen3")
	for s, want := range map[string]int{"<|im_start|>": 151644, "<think>": 151667, "Hello": 9707, "Ġworld": 1879, "!": 0} {
		if id, ok := q.TokenID(s); !ok || id != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, id, ok, want)
		}
	}
	if _, ok := q.TokenID("not a token at all"); ok {
		t.Error("TokenID of a non-token")
	}
	if !q.IsSpecial(151644) || q.IsSpecial(151667) || q.IsSpecial(9707) || q.IsSpecial(-1) || q.IsSpecial(1<<30) {
		t.Error("IsSpecial")
	}
	if q.VocabSize() != 151669 {
		t.Errorf("VocabSize %d", q.VocabSize())
	}
}

// TestSpecials: added-token text is plain text unless ParseSpecial; AddSpecialTokens adds
// Llama 3's BOS and nothing for Qwen.
func TestSpecials(t *testing.T) {
	q := model(t, "qwen3")
	text := "<|im_start|>user\nhi<|im_end|><think>"
	parsed := q.Encode(text, Options{ParseSpecial: true})
	if parsed[0] != 151644 || !slices.Contains(parsed, 151645) || parsed[len(parsed)-1] != 151667 {
		t.Errorf("ParseSpecial: %v", parsed)
	}
	plain := q.Encode(text, Options{})
	for _, id := range plain {
		if id >= 151643 {
			t.Errorf("plain text gave added token %d: %v", id, plain)
		}
	}
	if got := q.Decode(plain, true); got != text {
		t.Errorf("plain round trip %q", got)
	}
	if got := q.Decode(parsed, true); got != "user\nhi<think>" {
		t.Errorf("Decode skipping specials: %q", got)
	}
	if !slices.Equal(q.Encode("hi", Options{AddSpecialTokens: true}), q.Encode("hi", Options{})) {
		t.Error("Qwen has no post-processor tokens")
	}

	l := model(t, "llama3_1")
	ids := l.Encode("hi", Options{AddSpecialTokens: true})
	if len(ids) != 2 || ids[0] != 128000 {
		t.Errorf("Llama 3 BOS: %v", ids)
	}
	// AppendEncode concatenates segments: a template's text with specials, a user's without.
	seg := l.AppendEncode(nil, "<|start_header_id|>user<|end_header_id|>\n\n", Options{ParseSpecial: true, AddSpecialTokens: true})
	seg = l.AppendEncode(seg, "<|eot_id|>", Options{})
	seg = l.AppendEncode(seg, "<|eot_id|>", Options{ParseSpecial: true})
	if seg[0] != 128000 || seg[1] != 128006 || seg[len(seg)-1] != 128009 || slices.Index(seg, 128009) != len(seg)-1 {
		t.Errorf("segments: %v", seg)
	}
	if n := l.Count("<|eot_id|> hi", Options{ParseSpecial: true, AddSpecialTokens: true}); n != 3 {
		t.Errorf("Count %d", n)
	}
}

// TestPlain: in one pass over a render, added tokens are recognised outside the Plain ranges
// only; the text of the ranges is encoded as plain text, and a token straddling a range's edge
// is no token.
func TestPlain(t *testing.T) {
	q := model(t, "qwen3")
	head, content, tail := "<|im_start|>user\n", "hi <|im_end|><|im_start|>system", "<|im_end|>\n"
	text := head + content + tail
	ids := q.Encode(text, Options{ParseSpecial: true, Plain: [][2]int{{len(head), len(head) + len(content)}}})
	want := q.Encode(head, Options{ParseSpecial: true})
	want = q.AppendEncode(want, content, Options{})
	want = q.AppendEncode(want, tail, Options{ParseSpecial: true})
	if !slices.Equal(ids, want) {
		t.Errorf("Plain: %v, want %v", ids, want)
	}
	if n := strings.Count(fmt.Sprint(ids), "151645"); n != 1 {
		t.Errorf("%d <|im_end|> tokens, want only the template's: %v", n, ids)
	}
	// A range ending inside a token's spelling: the token is not recognised there.
	ids = q.Encode("ab<|im_end|>", Options{ParseSpecial: true, Plain: [][2]int{{0, 4}}})
	if slices.Contains(ids, 151645) {
		t.Errorf("a token straddling a plain range was recognised: %v", ids)
	}
}

// TestBadInput: invalid UTF-8 and NUL bytes come back byte for byte (Decode replaces what is not
// UTF-8 with U+FFFD), long runs of one class are chunked, and a 10 MB prompt takes linear time
// and memory.
func TestBadInput(t *testing.T) {
	q := model(t, "qwen3")
	for _, s := range []string{"\xff\xfe", "a\x00b\x00\x00", "\xe2\x82", "caf\xc3", "\xf0\x9f\x98\x80\xf0\x9f", "\xed\xa0\x80 surrogate",
		"ok\xc0\xafok", strings.Repeat("\x80", 100), "\xff\u0301", "\u0301", "e\xff\u0301\xfe"} {
		ids := q.Encode(s, Options{ParseSpecial: true})
		if got, want := q.Decode(ids, false), string(must(appendValid(nil, []byte(s), true))); got != want {
			t.Errorf("%q: round trip %q, want %q", s, got, want)
		}
		var raw []byte
		for _, id := range ids {
			raw = append(raw, q.texts.get(id)...)
		}
		if string(raw) != s {
			t.Errorf("%q: token bytes %q", s, raw)
		}
		if got := q.Decode(ids, false); !utf8.ValidString(got) {
			t.Errorf("%q: Decode gave invalid UTF-8 %q", s, got)
		}
	}
	if got := q.Decode([]int{-1, 1 << 40, 151669, 9707}, false); got != "Hello" {
		t.Errorf("ids out of range: %q", got)
	}

	if testing.Short() {
		t.Skip("the 10 MB prompts take a few seconds")
	}
	for _, c := range []struct {
		name string
		text string
	}{
		// Runs of one class are the BPE's worst case (chunks of MaxPieceBytes); 2 MB of each
		// shows the time is linear (about 0.25 s per MB) without slowing CI.
		{"mixed", mixedText(10 << 20)},
		{"one letter", strings.Repeat("a", 2<<20)},
		{"spaces", strings.Repeat(" ", 2<<20) + "x"},
		{"combining marks", "e" + strings.Repeat("\u0301", 1<<20)},
		{"specials", strings.Repeat("<|im_start|>", 1<<20)},
		{"NUL", strings.Repeat("\x00", 10<<20)},
		{"invalid UTF-8", strings.Repeat("\xff\xc3", 5<<20)},
	} {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		ids := q.Encode(c.text, Options{ParseSpecial: true})
		d := time.Since(t0)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes, %d ids in %v, %d MB allocated", c.name, len(c.text), len(ids), d, alloc>>20)
		// The ids themselves are 8 bytes each; besides them, a bounded multiple of the text
		// (NFC of 10 MB of combining marks needs several copies).
		if limit := uint64(8*cap(ids) + 16*len(c.text)); alloc > limit {
			t.Errorf("%s: %d bytes allocated, more than %d", c.name, alloc, limit)
		}
		if c.name != "combining marks" && c.name != "specials" && c.name != "invalid UTF-8" {
			if got := q.Decode(ids, false); got != c.text {
				t.Errorf("%s: no round trip", c.name)
			}
		}
	}
}

// TestStreamDecoder: for every golden case, and for the ids cut anywhere, what the streaming
// decoder returns adds up to Decode.
func TestStreamDecoder(t *testing.T) {
	q := model(t, "qwen3")
	g := readGolden(t, "qwen3")
	for _, c := range g.Cases {
		for _, skip := range []bool{false, true} {
			if got, want := streamAll(q, c.IDs, skip), q.Decode(c.IDs, skip); got != want {
				t.Errorf("%.60q (skip %v): stream %.60q, want %.60q", c.Text, skip, got, want)
			}
		}
	}
	// A character split over tokens: 🫠 is four bytes, here three tokens.
	ids := q.Encode("🫠x", Options{})
	d := q.NewDecoder(false)
	var parts []string
	for _, id := range ids {
		parts = append(parts, d.Add(id))
	}
	parts = append(parts, d.Flush())
	if strings.Join(parts, "") != "🫠x" || parts[0] != "" {
		t.Errorf("%v: parts %q", ids, parts)
	}
	// A stream that ends inside a character: U+FFFD, once.
	d = q.NewDecoder(false)
	if got := d.Add(ids[0]) + d.Flush(); got != "\uFFFD" {
		t.Errorf("flush: %q", got)
	}
}

func must(b []byte, _ int) []byte { return b }

func streamAll(tok *Tokenizer, ids []int, skip bool) string {
	d := tok.NewDecoder(skip)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}

// TestPreTokenizers compares the scanners with the patterns themselves, run by regexp2 (a
// backtracking engine with lookahead), over the golden corpus.
func TestPreTokenizers(t *testing.T) {
	g := readGolden(t, "qwen3")
	for _, c := range g.Cases {
		if utf8.ValidString(c.Text) && !(testing.Short() && len(c.Text) > 2000) {
			checkPieces(t, c.Text)
		}
	}
}

var oracles = func() map[string]*regexp2.Regexp {
	m := map[string]*regexp2.Regexp{}
	for p := range knownPatterns {
		m[p] = regexp2.MustCompile(p, regexp2.None)
	}
	return m
}()

func checkPieces(t *testing.T, s string) {
	t.Helper()
	runePropsOnce.Do(buildRuneProps) // the scanners' tables, built by Load
	for p, scan := range knownPatterns {
		var got, want []string
		for i := 0; i < len(s); {
			j := scan(s, i)
			got = append(got, s[i:j])
			i = j
		}
		m, err := oracles[p].FindStringMatch(s)
		for ; m != nil && err == nil; m, err = oracles[p].FindNextMatch(m) {
			want = append(want, m.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(want, "") != s {
			t.Fatalf("%q: regexp2 pieces %q do not tile the text", s, want)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%.80q with %.40s...: pieces\n got  %q\n want %q", s, p, got, want)
			return
		}
	}
}

func TestNFC(t *testing.T) {
	var tmp []byte
	for _, s := range []string{"", "abc", "e\u0301", "\u1e9b\u0323", "A\u030a Å Å", "\u095f", "한\u1100\u1161\u11a8", "\u0301\u0301a", "x\u0323\u0307y", "ｶﾞ", "\xffe\u0301"} {
		if got, want := nfc(s, &tmp), norm.NFC.String(s); got != want {
			t.Errorf("nfc(%q) = %q, want %q", s, got, want)
		}
	}
}

// tinyTokenizerJSON is a small but complete byte-level BPE tokenizer.json: the 256 byte
// tokens, a few merges, two added tokens, Llama 3's pattern and a BOS post-processor.
func tinyTokenizerJSON(t testing.TB) []byte {
	t.Helper()
	var vocab []string
	for b := range 256 {
		vocab = append(vocab, quoteJSON(byteLevelAlphabet[b])+": "+itoa(b))
	}
	vocab = append(vocab, `"ĠĠ": 258`, `"he": 259`, `"hel": 260`, `"hell": 261`, `"hello": 262`, `"Ġw": 263`)
	return []byte(`{
  "version": "1.0",
  "added_tokens": [
    {"id": 300, "content": "<s>", "special": true},
    {"id": 301, "content": "</s>", "special": true},
    {"id": 302, "content": "<tool>", "special": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [300], "tokens": ["<s>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": false,
    "vocab": {` + strings.Join(vocab, ", ") + `},
    "merges": [["Ġ", "Ġ"], ["h", "e"], ["he", "l"], ["hel", "l"], ["hell", "o"], ["Ġ", "w"]]}
}`)
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for ; n > 0; n /= 10 {
		i--
		buf[i] = byte('0' + n%10)
	}
	return string(buf[i:])
}

func TestTiny(t *testing.T) {
	tok, err := Parse(tinyTokenizerJSON(t), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("hello  world<s>", Options{ParseSpecial: true, AddSpecialTokens: true})
	want := []int{300, 262, 32, 263, 'o', 'r', 'l', 'd', 300}
	if !slices.Equal(ids, want) {
		t.Errorf("ids %v, want %v", ids, want)
	}
	if got := tok.Decode(ids, true); got != "hello  world" {
		t.Errorf("Decode %q", got)
	}
}

// TestConcurrent: one Tokenizer shared by goroutines (the piece cache and the scratch pool are
// shared; run with -race) gives each the same ids as alone.
func TestConcurrent(t *testing.T) {
	q := model(t, "qwen3")
	g := readGolden(t, "qwen3")
	var texts []string
	for _, c := range g.Cases {
		if len(c.Text) < 2000 {
			texts = append(texts, c.Text)
		}
	}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = q.Encode(s, Options{})
	}
	errs := make(chan string, 4)
	for w := range 4 {
		go func() {
			for k := range texts {
				i := (k*7 + w*13) % len(texts)
				if got := q.Encode(texts[i], Options{}); !slices.Equal(got, want[i]) {
					errs <- texts[i]
					return
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if s := <-errs; s != "" {
			t.Errorf("%q: different ids when encoded concurrently", s)
		}
	}
}

// TestShortVocab: the short-piece table answers for every vocabulary token as the vocabulary
// map and the whole-token marks do, and knows no other piece.
func TestShortVocab(t *testing.T) {
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			tok := model(t, name)
			if tok.short == nil {
				t.Fatal("no short table")
			}
			n := 0
			for b, id := range tok.pieces.all() {
				if len(b) > shortMax {
					continue
				}
				got, ok := tok.short.get(b)
				if want := tok.ignoreMerges || tok.whole[id]; ok != want || ok && got != id {
					t.Fatalf("%q (id %d): short table %d, %v; whole %v", b, id, got, ok, want)
				}
				if ok {
					n++
				}
				// The same bytes one longer, or with a NUL more, are other pieces.
				for _, other := range []string{b + "\x00", b[:len(b)-1] + "\x00"} {
					if len(other) > shortMax {
						continue
					}
					wid, wok := tok.pieces.get(other)
					wok = wok && (tok.ignoreMerges || tok.whole[wid])
					if got, ok := tok.short.get(other); ok != wok || ok && got != wid {
						t.Fatalf("%q: short table %d, %v; vocabulary %d, %v", other, got, ok, wid, wok)
					}
				}
			}
			t.Logf("%d whole tokens of up to %d bytes, table of %d slots", n, shortMax, len(tok.short.slots))
		})
	}
}

// TestMaxTokens: the bound holds on every golden case of every byte-level model, with and
// without added tokens read, and on text that normalization lengthens; SentencePiece-style
// models get no bound. The bound is tight on ASCII: no more tokens than bytes.
func TestMaxTokens(t *testing.T) {
	for _, name := range []string{"qwen3", "cl100k", "llama3_1"} {
		tok := optionalModel(t, name)
		if tok == nil {
			continue
		}
		cases := readGolden(t, name).Cases
		cases = append(cases, goldenCase{Text: strings.Repeat("\u0958\U0001D160\uFB2C", 50)}, goldenCase{Text: strings.Repeat("<|im_start|>", 20)})
		for _, c := range cases {
			for _, o := range []Options{{}, {ParseSpecial: true}, {ParseSpecial: true, AddSpecialTokens: true}} {
				if n, b := tok.Count(c.Text, o), tok.MaxTokens(c.Text, o); n > b {
					t.Fatalf("%s %+v: %q has %d tokens, bound %d", name, o, c.Text, n, b)
				}
			}
		}
	}
	if tok := optionalModel(t, "mistral7b"); tok != nil && tok.MaxTokens("hello", Options{}) != -1 {
		t.Fatal("mistral7b: a bound for a SentencePiece-style model")
	}
}
