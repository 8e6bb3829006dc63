// Package responses serves OpenAI's Responses API (POST /v1/responses; GET and DELETE
// /v1/responses/{id}; GET /v1/responses/{id}/input_items; POST /v1/responses/{id}/cancel) on
// the gateway, for the current OpenAI SDKs and the agent frameworks built on them.
//
// # Two ways to serve, per endpoint
//
// Translation (lib/openaiwire's ResponsesToChat, ChatToResponse, ResponsesStream) turns the
// request into a chat completions body served in-process by the gateway's own
// /v1/chat/completions handler (Options.Chat), so keys, limits, breakers, failover, the
// context-length check, chat templates, the response cache, sessions, Granite processing and
// metrics apply as to any chat request; the answer comes back as a Response, or as the
// Responses event stream. Pass-through (Options.NativeHandler: the gateway's proxy) sends the
// request to the upstreams' own /v1/responses. Options.Mode chooses per model: native,
// translate, or (the default) auto: pass through, and remember each endpoint that answers a
// bare 404 there (it has no such route) as chat-only for ten minutes, translating for it.
//
// # State
//
// The gateway keeps the state, in both modes (store/responsestate: in the process, or in Redis
// shared by the replicas). A response made with store (the default) is stored, before its last
// byte or final event is sent, with its input items and the conversation before it; a request
// naming it as previous_response_id continues that conversation (its items, never its
// instructions). An upstream never sees previous_response_id: it gets store false and the
// conversation written out as input items, and the Response it answers is made to say what
// the client asked. A response belongs to the API key that made it: an unknown id and another
// key's get the same answers (404 for GET, DELETE and input_items; 400
// previous_response_not_found for a continuation).
//
// Background responses are not run (background true is refused by the translation; an
// upstream serving it natively refuses it with store false): cancel answers "Cannot cancel a
// synchronous response." for every stored response.
package responses
