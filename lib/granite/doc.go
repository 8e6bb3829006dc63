// Package granite is granite-io's processing for IBM Granite models, in Go: it turns a
// structured chat request (messages, tools, RAG documents, output controls, "thinking") into
// the exact prompt string Granite 3.2 or 3.3 was fine-tuned on, and the model's raw completion
// back into a structured assistant message (reasoning split from the answer, tool calls,
// citations and hallucinations with character offsets).
//
// The four roles are small interfaces, as in granite-io: InputProcessor (request -> prompt),
// OutputProcessor (completions -> results), IOProcessor (request -> results, free to call its
// Backend any number of times) and Backend (a string completions API, which the gateway
// implements over its own routing). NewSimple composes the first two and a Backend.
//
// Processors are found by name in a Registry. NewDefaultRegistry holds Granite 3.2 and 3.3
// under granite-io's names and aliases ("granite3.2", "granite3.2:8b",
// "ibm-granite/granite-3.3-8b-instruct", ...; see Version.Names). A Go program adds its
// own processor by implementing InputProcessor and OutputProcessor (and, for a multi-call
// flow, IOProcessor through Entry.NewIO) and calling Register with a name and aliases; see
// ExampleRegistry and examples/graniteproc.
//
// IO processors beyond one call: MajorityVoting (granite-io's MajorityVotingProcessor: n
// samples, answers normalized, the most common returned with its vote count; Voting wraps a
// registry entry in it) and Sequence (a chain in which each step's answer feeds the next step's
// request, such as a query rewrite before a RAG answer). granite-io registers neither under a
// name, so neither is in NewDefaultRegistry. Backends: granitekserve (a KServe model with
// text_input/text_output) and granitestage's (a /v1/completions call through the gateway's
// routing).
//
// Fidelity. Prompts are byte-identical to granite-io's (its golden files are tests here) with
// one deliberate exception: for Granite 3.2 with documents and no tools granite-io drops the
// space in "developed by IBM. Write the response"; this package writes the space, as the
// model's chat template does. The date line comes from an injectable clock read per request
// (WithClock). Output parsing follows granite-io, quirks included (for example Granite 3.3's
// citation response_end), except that tool calls are read as vLLM's granite parser reads them
// (optional <|tool_call|> or <tool_call>, then a JSON list), and that what granite-io raises on
// (a repeated section header, a citation sentence it cannot locate) becomes
// AssistantMessage.ParseError, with the answer cleaned as usual and the sections after it, as the
// model wrote them, in the content. Three more departures, on output granite-io does not expect,
// keep a streamed answer the whole one (below): a <response> section the model never closed runs
// to the end of the text (granite-io keeps the text whole, tag and all); a thought it never
// closed stays content, as in granite-io, with a ParseError saying so; and a section Granite 3.3
// leaks without controls is cut off with the whitespace before it but not the answer's leading
// whitespace. Past MaxOutputBytes only the sections go unparsed. Sentence splitting approximates
// NLTK's Punkt (see splitSentences).
//
// Streaming: Processor.ParseStream parses one completion as it is generated (an OutputStream):
// it lets reasoning and content out as soon as no continuation of the text can change them in
// Parse's answer, holding back what a marker, section header or closing tag may still change,
// and on Close parses the whole text as Parse does and lets out the rest. What it let out and
// the rest are Parse's answer for any text (FuzzStreamParse), but for a thought the model never
// closed, let out as reasoning on the way, which the whole answer has as content.
//
// The package does no I/O and keeps no global state; every input is bounded (MaxMessages,
// MaxDocuments, MaxTools, MaxOutputBytes).
package granite
