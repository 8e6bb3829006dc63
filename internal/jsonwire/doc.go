// Package jsonwire is the gateway's one JSON foundation: what its hand-written readers and
// writers of JSON text share, so that each of them is a few lines of what it wants from a
// document rather than another copy of the grammar.
//
//   - Scanner: a validating pull scanner over a []byte. The caller asks for what it expects next
//     (EnterObject and NextMember, EnterArray and NextElement, ReadString, ReadNumber, ReadBool,
//     ReadNull, ReadValue to skip any value) and gets Tokens: offsets into its own input, with
//     flags that say whether a string needs unescaping or a number is an integer. Nothing is
//     copied. Errors are *SyntaxError with the byte offset of the fault; nesting past the bound
//     wraps ErrTooDeep. Valid, Validate and SkipValue are the one-call forms.
//   - Unescape and UnescapeString: a string's contents to its value, with the three ways of
//     treating text that is not UTF-8 the callers need (UTF8).
//   - AppendString and AppendContents: a string as JSON, with the escaping each former writer
//     used (Escaping, and its presets).
//   - SkipPlain, SkipPlainASCII, SkipPlainHTML: the eight-bytes-at-a-time skips over string
//     contents that the scanner and the writer run on.
//
// # What it accepts
//
// With the zero Options, a document read to Finish (or given to Valid) is accepted exactly when
// encoding/json's Valid accepts it: RFC 8259's grammar, numbers to the letter
// (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?), nesting to 10,000 levels, and, as
// encoding/json has it, invalid UTF-8 and lone UTF-16 surrogate escapes inside strings. Every
// scanner the gateway had accepted those too. Options.StrictUTF8 refuses both (RFC 8259 section
// 8.1, I-JSON), for a caller that copies string literals into its output as they are.
// FuzzWire checks all of this against encoding/json on the same input, along with the extents
// of every value, the unescaping of every string and the writer's round trip.
//
// # Unescaping
//
// Lone surrogates become U+FFFD as encoding/json has them (see UTF8). Invalid UTF-8 is what the
// callers differ on: the chat template's and the Granite stage's readers replaced each byte with
// U+FFFD as encoding/json does (ReplaceInvalid); the Anthropic translation, the tensor decoder
// (a BYTES element is bytes) and the response cache's canonical form kept the bytes
// (KeepInvalid, the cache then replacing them as it writes). RejectInvalid is StrictUTF8's
// counterpart. golden_test.go pins each mode to what those unescapers produced.
//
// # Writing
//
// The four writers (and the Granite prompt's Python one) differ in five choices, each a flag:
//
//	writer                     preset        \b \f      \n \r \t  < > &    U+2028/9  invalid UTF-8  non-ASCII
//	anthropic appendString     Minimal       \u0008     short     as is    as is     \ufffd         as is
//	tensor AppendJSONString    MinimalShort  \b \f      short     as is    as is     \ufffd         as is
//	granitestage appendJSON..  EncodingJSON  \b \f      short     \u003c.. \u2028    \ufffd         as is
//	respcache appendString     Canonical     \u0008     \u000a..  as is    as is     raw U+FFFD     as is
//	granite pyString           PythonASCII   \b \f      short     as is    \u2028    \ufffd         \uXXXX, DEL \u007f
//
// Other control characters are \u00XX (lower-case hex) in all; '/' is never escaped.
// EncodingJSON is json.Marshal's output byte for byte. Canonical feeds the response cache's
// keys: changing it changes every key. golden_test.go pins each preset to the bytes its writer
// produced (captured by testdata/capture/capture.sh).
//
// # Why in-house
//
// Two well-kept libraries were measured against this package on the gateway's bodies
// (testdata/bench), in one process, 8 interleaved runs on the 2-core development machine, with
// benchstat (medians; the machine was shared, so spreads reached ±20%):
// github.com/go-json-experiment/json v1.27.2's jsontext (the code of Go's encoding/json/jsontext
// experiment), its Decoder reading a bytes.Buffer in place, with AllowDuplicateNames and
// AllowInvalidUTF8 so that it accepts what encoding/json does; and
// github.com/segmentio/encoding v0.5.4's json (its Tokenizer does not check the grammar, so its
// Valid runs first).
//
//	operation (input)                     jsonwire          jsontext          segmentio          encoding/json
//	routing: validate, find model/stream
//	  routing.json (1 KB)                 570 ns  1 alloc   917 ns  (1.61x)   961 ns  (1.69x)    6.8 µs  8 allocs (11.9x)
//	  agent.json (1.5 KB, tool call)      906 ns  1 alloc   1.46 µs (1.61x)   2.47 µs (2.72x)    10.4 µs 9 allocs (11.5x)
//	  history.json (80 KB, 40 turns)      47.1 µs 1 alloc   84.4 µs (1.79x)   152 µs  (3.22x)    543 µs  9 allocs (11.5x)
//	skip the 80 KB messages array         49.3 µs 0         77.6 µs (1.57x)   63.6 µs (1.29x) 2  265 µs (Valid) (5.4x)
//	unescape 3.4 KB literal, \u-heavy     3.57 µs 0         3.55 µs (1.00x)   17.6 µs (4.9x) 19  23.4 µs 3 allocs (6.6x)
//	AppendString 3 KB mixed text
//	  minimal escaping                    2.48 µs 0         2.75 µs (1.11x)   3.55 µs (1.43x)    -
//	  encoding/json's (HTML, U+2028)      3.45 µs 0         3.01 µs (0.87x)   3.91 µs (1.13x)    6.24 µs 2 allocs (1.81x)
//
// (B/op: the one allocation is the model string, 5 to 48 bytes, the same in all three
// libraries; segmentio's skip allocates 24 B, its unescape 4.3 KB.) The request router's own
// scanner (core/pipeline scanRouting), which this replaces, took 645 ns on routing.json against
// jsonwire's 560 ns, interleaved.
//
// jsonwire is chosen. It is the fastest at what the gateway does most, walking a body to find
// a few members and skipping the rest (1.6 to 1.8 times jsontext, 1.3 to 3.2 times segmentio),
// on par in unescaping, and within 13% of jsontext's HTML-escaping writer. Neither library
// writes all the bytes the callers must keep: jsontext's AppendQuote has one escaping (no \u0008
// form, invalid UTF-8 written as a raw U+FFFD and reported as an error, HTML and U+2028 only
// through an Encoder, no ASCII-only form), so the cache keys, the Anthropic output and the
// Python prompt could not be reproduced; segmentio always escapes U+2028, has no depth bound
// in Valid (it accepts 10,001 nested arrays, which encoding/json refuses), its Tokenizer takes
// "01", "1 2" and "{" as valid, and it reaches into the runtime through unsafe. jsontext also
// refuses duplicate names, invalid UTF-8 and lone surrogates by default (a gateway that
// forwards bodies must not be stricter than its upstreams without meaning to), reads from an
// io.Reader rather than handing out offsets into the caller's bytes, and its module warns that
// it "will regularly experience breaking changes". Taking either would add a dependency and
// still leave the writers and the unescaper's modes in-house.
//
// What in-house gives up: the package is the gateway's to keep correct (FuzzWire against
// encoding/json is that upkeep), it has no reader over an io.Reader (every caller holds the
// whole body), no decoding into structs (callers keep encoding/json for their slow paths), no
// SIMD beyond eight bytes at a time, and jsontext's HTML-escaping writer is about 13% faster.
// Should encoding/json/jsontext land in the standard library, the comparison is worth running
// again (the scratch module is described in bench_test.go).
package jsonwire
