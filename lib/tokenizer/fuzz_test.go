package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzLoad: tokenizer.json's decoder on mutated files never panics, and what it accepts encodes
// and decodes without panicking. The seeds are small complete files (the real ones, 10 MB,
// would make each iteration take a second); memory stays bounded by the id checks in Parse.
func FuzzLoad(f *testing.F) {
	tiny := string(tinyTokenizerJSON(f))
	f.Add(tiny)
	f.Add(strings.Replace(tiny, `"ignore_merges": false`, `"ignore_merges": true`, 1))
	f.Add(strings.Replace(tiny, `"normalizer": {"type": "NFC"}`, `"normalizer": null`, 1))
	f.Add(strings.Replace(tiny, `"special": false}`, `"special": false, "lstrip": true, "rstrip": true, "single_word": true}`, 1))
	// GPT-2's layout: the ByteLevel pre-tokenizer with its own regex, merges as strings.
	gpt2 := strings.Replace(tiny, tiny[strings.Index(tiny, `"pre_tokenizer"`):strings.Index(tiny, `"post_processor"`)],
		`"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}, `, 1)
	gpt2 = strings.Replace(gpt2, `[["Ġ", "Ġ"], ["h", "e"], ["he", "l"], ["hel", "l"], ["hell", "o"], ["Ġ", "w"]]`,
		`["Ġ Ġ", "h e", "he l", "hel l", "hell o", "Ġ w"]`, 1)
	f.Add(gpt2)
	f.Add(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "decoder": {"type": "ByteLevel"}}`)
	f.Add(`{"model": {"vocab": {"a": 4000000}, "merges": []}}`)
	// SentencePiece-style: Llama 2's layout, without byte_fallback, and with Metaspace.
	spm := tinySPMJSON(f)
	f.Add(spm)
	f.Add(strings.Replace(spm, `"byte_fallback": true`, `"byte_fallback": false`, 1))
	f.Add(strings.Replace(strings.Replace(spm, `"pre_tokenizer": null`,
		`"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true}`, 1),
		`{"type": "Prepend", "prepend": "▁"}, `, ``, 1))
	f.Add(`{"model": {"type": "BPE", "vocab": {"▁": 0, "a": 1, "▁a": 2}, "merges": [["▁", "a"]], "byte_fallback": true}, "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, "decoder": {"type": "Fuse"}}`)
	f.Fuzz(func(t *testing.T, data string) {
		tok, err := Parse([]byte(data), []byte(`{"bos_token": "<s>", "eos_token": "</s>"}`), nil)
		if err != nil {
			return
		}
		for _, s := range []string{"hello  world <s> é\u0301 \xff 123456 <tool>", data[:min(len(data), 200)]} {
			for _, o := range []Options{{}, {ParseSpecial: true, AddSpecialTokens: true}} {
				ids := tok.Encode(s, o)
				if n := tok.Count(s, o); n != len(ids) {
					t.Fatalf("Count %d, len(Encode) %d", n, len(ids))
				}
				if got := tok.Decode(ids, false); !utf8.ValidString(got) {
					t.Fatalf("Decode gave invalid UTF-8 %q", got)
				}
			}
		}
	})
}

// FuzzStreamDecoder: for any sequence of ids (valid, special, out of range, cutting characters
// anywhere), the streaming decoder's output adds up to Decode of them all. The ids are 3-byte
// little-endian numbers, most of them inside Qwen 3's vocabulary; Mistral 7B's (SentencePiece
// byte tokens, and the Strip of the text's start), when its files are there, decodes the same ids
// modulo 32768 (32,000 tokens and some that are not).
func FuzzStreamDecoder(f *testing.F) {
	tok := model(f, "qwen3")
	spm := optionalModel(f, "mistral7b")
	ids := func(tok *Tokenizer, s string) []byte {
		var b []byte
		for _, id := range tok.Encode(s, Options{ParseSpecial: true}) {
			b = append(b, byte(id), byte(id>>8), byte(id>>16))
		}
		return b
	}
	f.Add(ids(tok, "Hello, 世界! 👨‍👩‍👧‍👦 <|im_end|>"), false)
	f.Add(ids(tok, "🫠🫡 naïve\xff\xc3"), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 0x00, 0x00}, false)
	if spm != nil {
		f.Add(ids(spm, "<s> Hello,  世界! 🧿\n\t naïve\xff\xc3</s>"), false)
		f.Add(ids(spm, " \U0001FAE0 x"), true)
		// <0xE4><0xBD><0xA0> (你) then ▁Hello: the space after a character is not the text's start.
		f.Add([]byte{3 + 0xE4, 0, 0, 3 + 0xBD, 0, 0, 3 + 0xA0, 0, 0, 22557 & 0xff, 22557 >> 8, 0}, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, skip bool) {
		var seq []int
		for len(data) >= 3 {
			seq = append(seq, int(data[0])|int(data[1])<<8|int(data[2])<<16) // up to 16M
			data = data[3:]
		}
		want := tok.Decode(seq, skip)
		if got := streamAll(tok, seq, skip); got != want {
			t.Fatalf("ids %v: stream %q, Decode %q", seq, got, want)
		}
		if !utf8.ValidString(want) {
			t.Fatalf("Decode gave invalid UTF-8 %q", want)
		}
		if spm == nil {
			return
		}
		for i := range seq {
			seq[i] &= 1<<15 - 1
		}
		want = spm.Decode(seq, skip)
		if got := streamAll(spm, seq, skip); got != want {
			t.Fatalf("mistral7b ids %v: stream %q, Decode %q", seq, got, want)
		}
		if !utf8.ValidString(want) {
			t.Fatalf("mistral7b: Decode gave invalid UTF-8 %q", want)
		}
	})
}

// optionalModel is model, or nil when the model's files were not fetched (and are not required),
// so that a fuzz target can cover it without skipping the others.
func optionalModel(tb testing.TB, name string) *Tokenizer {
	if _, err := os.Stat(filepath.Join("testdata", name)); err != nil && os.Getenv("INFERGATE_REQUIRE_TOKENIZER_DATA") != "1" {
		return nil
	}
	return model(tb, name)
}

// FuzzEncode: Decode(Encode(s)) is s (after NFC, Qwen's normalizer) for valid UTF-8 with added
// tokens left as text; the token bytes are s's own for any input; the quick NFC agrees with
// norm; and the pre-tokenizer scanners agree with the patterns run by regexp2. With Mistral 7B's
// tokenizer (SentencePiece-style, when its files are there), checkSentencePiece.
func FuzzEncode(f *testing.F) {
	tok := model(f, "qwen3")
	spm := optionalModel(f, "mistral7b")
	for _, s := range []string{"Hello, world!", "  a\n\n b\r\n\t", "I'M 'Ll don't", "e\u0301\u0323", "你好😀👍🏽", "<|im_start|>x", "\xff\x00", "123456789", "\u00a0\u3000 x",
		"▁hello ▁▁ x▁", "<s>[INST] hi [/INST]</s>", "<0x41> \U0001F9FF\n\t", "   ", "a<|im_end|>\n<think>b</think><<|endoftext|>",
		"\u0958\u0958\U0001D160\uFB2C\u2126"} {
		f.Add(s)
	}
	var tmp []byte
	f.Fuzz(func(t *testing.T, s string) {
		if spm != nil {
			checkSentencePiece(t, spm, s)
		}
		ids := tok.Encode(s, Options{})
		if b := tok.MaxTokens(s, Options{}); len(ids) > b {
			t.Fatalf("%q: %d tokens, more than MaxTokens' bound %d", s, len(ids), b)
		}
		var raw []byte
		for _, id := range ids {
			raw = append(raw, tok.texts.get(int(id))...)
		}
		if want := nfc(s, &tmp); string(raw) != want {
			t.Fatalf("%q: token bytes %q, want %q", s, raw, want)
		}
		if !utf8.ValidString(s) {
			return
		}
		if got, want := tok.Decode(ids, false), normalized(tok, s); got != want {
			t.Fatalf("%q: round trip %q", s, got)
		}
		checkPieces(t, s)
		// Encoding with added tokens recognised covers the same text.
		special := tok.Encode(s, Options{ParseSpecial: true})
		if b := tok.MaxTokens(s, Options{ParseSpecial: true}); len(special) > b {
			t.Fatalf("%q: %d tokens with ParseSpecial, more than MaxTokens' bound %d", s, len(special), b)
		}
		if got := tok.Decode(special, false); len(got) == 0 && len(s) > 0 {
			t.Fatalf("%q: nothing back with ParseSpecial", s)
		}
		// The quick paths give what the plain ones give: the short-piece table the vocabulary
		// map's answer for every piece, the scan for added tokens that jumps from one '<' to
		// the next the byte-by-byte scan's sections.
		tok.pretokenize(nfc(s, &tmp), 0, func(piece string) {
			if len(piece) > shortMax {
				return
			}
			id, ok := tok.short.get(piece)
			wid, wok := tok.pieces.get(piece)
			if wok = wok && tok.whole[wid]; ok != wok || ok && id != wid {
				t.Fatalf("%q: piece %q: short table %d, %v; vocabulary %d, %v", s, piece, id, ok, wid, wok)
			}
		})
		first := tok.onlyFirst
		tok.onlyFirst = -1
		slow := tok.Encode(s, Options{ParseSpecial: true})
		tok.onlyFirst = first
		if !slices.Equal(special, slow) {
			t.Fatalf("%q: %v with the jumping scan for added tokens, %v without", s, special, slow)
		}
	})
}

// checkSentencePiece: with a SentencePiece-style tokenizer whose every byte has a token, any text
// (valid UTF-8 or not) comes back from its ids as the normalizer left it, "▁" as spaces (invalid
// bytes as U+FFFD in Decode), Count agrees, and with added tokens recognised the ids stream to
// Decode's text.
func checkSentencePiece(t *testing.T, tok *Tokenizer, s string) {
	t.Helper()
	ids := tok.Encode(s, Options{})
	if n := tok.Count(s, Options{}); n != len(ids) {
		t.Fatalf("%q: Count %d, len(Encode) %d", s, n, len(ids))
	}
	if got, want := tok.Decode(ids, false), string(must(appendValid(nil, []byte(spmRoundTrip(tok, s)), true))); got != want {
		t.Fatalf("%q: round trip %q, want %q", s, got, want)
	}
	ids = tok.Encode(s, Options{ParseSpecial: true, AddSpecialTokens: true})
	for _, skip := range []bool{false, true} {
		if got, want := streamAll(tok, ids, skip), tok.Decode(ids, skip); got != want || !utf8.ValidString(got) {
			t.Fatalf("%q: stream %q, Decode %q", s, got, want)
		}
	}
}
