// Package anthropic serves Anthropic's Messages API (POST /v1/messages, POST
// /v1/messages/count_tokens, and GET /v1/models in Anthropic's shape) on the gateway, for the
// Anthropic SDKs and the agents built on them.
//
// # Two paths
//
// A model whose upstream speaks /v1/messages itself (vLLM 0.12 and later; Options.Native) gets
// the request unchanged (Options.NativeHandler). Every other request is translated to an OpenAI
// chat completions body and served in-process by the gateway's own /v1/chat/completions handler
// (Options.Chat), so API keys, limits, the response cache, sessions, routing and failover apply
// to it as to any chat request; its answer is translated back as it comes: a whole completion
// to a message, a stream chunk by chunk to Anthropic's event sequence, an OpenAI error object to
// Anthropic's error.
//
// # What is translated
//
// Request (Anthropic -> OpenAI chat):
//   - system (a string, or text blocks joined by newlines) -> a first system message; a system
//     block starting "x-anthropic-billing-header" (Claude Code's per-request billing hash) is
//     left out, as vLLM's own /v1/messages leaves it out, since it would defeat every prefix and
//     response cache. Role "system" messages in the conversation -> system messages.
//   - text, image (base64 -> a data: URL; url -> the URL) and document blocks (plain text and
//     content documents -> text parts, a base64 PDF -> OpenAI's file part; title and context
//     -> text parts before it) -> content parts; one text block -> a string.
//   - tool_use blocks -> the assistant message's tool_calls (input -> the arguments string);
//     tool_result blocks -> role "tool" messages placed before the rest of their user turn (an
//     OpenAI tool message must follow the tool calls); is_error -> content prefixed "Error: ".
//   - tools (custom tools) -> functions (input_schema -> parameters, strict kept); tool_choice
//     auto/any/tool/none -> "auto"/"required"/{"type":"function",...}/"none";
//     disable_parallel_tool_use -> parallel_tool_calls: false.
//   - max_tokens, temperature, top_p, stop_sequences -> max_tokens, temperature, top_p, stop;
//     top_k -> top_k (vLLM's sampling extra); metadata.user_id -> user; stream -> stream with
//     stream_options.include_usage (so the last chunk's usage becomes message_delta's).
//   - thinking enabled -> reasoning_effort (budget under 4096: low, under 16384: medium, else
//     high); output_config.effort -> reasoning_effort; output_config.format (json_schema) ->
//     response_format.
//   - a final assistant turn (a prefill) -> vLLM's continue_final_message: true with
//     add_generation_prompt: false, so the answer continues it, as Anthropic's does.
//
// Accepted and not sent, because they change nothing an OpenAI upstream could act on:
// cache_control (vLLM caches prefixes by itself), service_tier, speed, diagnostics, thinking "adaptive" and
// "disabled" (the model's default), anthropic-beta headers, citations on input text blocks, and
// thinking and redacted_thinking blocks of earlier assistant turns (OpenAI's chat API has no
// place for them; Anthropic's API does not show the model earlier turns' thinking either).
//
// Answer (OpenAI -> Anthropic): reasoning_content (or reasoning) -> a thinking block (with an
// empty signature: there is none to give), content -> a text block, tool calls -> tool_use
// blocks with their arguments parsed (arguments that are not a JSON object are a 502, never an
// empty input); finish_reason stop/length/tool_calls/content_filter -> stop_reason
// end_turn/max_tokens/tool_use/refusal (stop_sequence, with the string, when vLLM's stop_reason
// names the stop string that matched; tool_use whenever the answer has tool calls); usage
// prompt_tokens less cached_tokens -> input_tokens, cached_tokens -> cache_read_input_tokens,
// completion_tokens -> output_tokens. A stream is message_start (its usage the estimate below:
// the upstream counts the prompt only at the end), ping, one block at a time
// (content_block_start, text_delta / thinking_delta / input_json_delta, content_block_stop),
// message_delta (stop reason, the upstream's usage) and message_stop; an upstream failure, a
// malformed chunk or a stream cut short is an error event, after which nothing is sent. A client
// that asked for a stream and got a whole answer (a cached one) gets it as events.
//
// Errors: Anthropic's {"type":"error","error":{"type","message"},"request_id"} with the
// status: 400 invalid_request_error, 401 authentication_error, 403 permission_error, 404
// not_found_error, 413 request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error,
// other 5xx api_error; headers (Retry-After, X-Infergate-*, X-RateLimit-*) kept.
//
// # What is refused, and why
//
// A 400 invalid_request_error, never a silent drop: anything Anthropic's API itself refuses
// (missing model, max_tokens or messages; a conversation not starting with a user turn; empty
// content; an empty text block; a tool_use not answered by a tool_result in the next turn, or a
// tool_result answering nothing; unknown fields and block types), and what an OpenAI chat
// upstream cannot express: server tools (web search, code execution, bash, text editor...),
// container, mcp_servers, context_management, inference_geo, Files API sources, document URLs,
// citations, tool search and programmatic tool calling, input_examples, max_tokens 0, and
// search_result and other server-side blocks. And what would cost too much: more than 100,000
// content blocks (at every depth), 100,000 messages, 4,096 tools or 1,024 stop sequences,
// content nested deeper than 4 levels, JSON nested deeper than 10,000 levels (encoding/json's
// limit, the gateway's everywhere); each refusal names its limit. A list longer than the
// decoder's pooled storage is read again from the body whenever the translation walks it, so
// a request's memory does not grow with how many elements it holds.
//
// # count_tokens
//
// Options.CountTokens counts exactly when the model has a tokenizer (it gets the translated
// OpenAI body); otherwise the answer is an estimate: a quarter of the prompt's text bytes
// (system, messages, tool inputs and results, tool names, descriptions and schemas), rounded up,
// plus 1600 tokens per image (Anthropic's w*h/750 for about 1.15 megapixels).
//
// # API keys and models
//
// The gateway's key check reads x-api-key as it reads Authorization. AcceptAPIKey answers
// Anthropic clients' errors in Anthropic's shape; WrapModels answers GET /v1/models in
// Anthropic's shape to them. A client's x-api-key is never rewritten into another header: a
// translated request carries no client credential, and a native one carries it as sent, for
// the upstream to drop or (with forward_client_auth) pass on.
package anthropic
