package tokenizer

import (
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
// little-endian numbers, most of them inside Qwen 3's vocabulary.
func FuzzStreamDecoder(f *testing.F) {
	tok := model(f, "qwen3")
	ids := func(s string) []byte {
		var b []byte
		for _, id := range tok.Encode(s, Options{ParseSpecial: true}) {
			b = append(b, byte(id), byte(id>>8), byte(id>>16))
		}
		return b
	}
	f.Add(ids("Hello, 世界! 👨‍👩‍👧‍👦 <|im_end|>"), false)
	f.Add(ids("🫠🫡 naïve\xff\xc3"), true)
	f.Add([]byte{0xff, 0xff, 0xff, 0x00, 0x00, 0x00}, false)
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
	})
}

// FuzzEncode: Decode(Encode(s)) is s (after NFC, Qwen's normalizer) for valid UTF-8 with added
// tokens left as text; the token bytes are s's own for any input; the quick NFC agrees with
// norm; and the pre-tokenizer scanners agree with the patterns run by regexp2.
func FuzzEncode(f *testing.F) {
	tok := model(f, "qwen3")
	for _, s := range []string{"Hello, world!", "  a\n\n b\r\n\t", "I'M 'Ll don't", "e\u0301\u0323", "你好😀👍🏽", "<|im_start|>x", "\xff\x00", "123456789", "\u00a0\u3000 x", "a<|im_end|>\n<think>b</think><<|endoftext|>"} {
		f.Add(s)
	}
	var tmp []byte
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, Options{})
		var raw []byte
		for _, id := range ids {
			raw = append(raw, tok.tokBytes[id]...)
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
			wid, wok := tok.pieceID[piece]
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
