// Package openaiwire is infergate's one model of OpenAI's wire format: the request body as the
// pipeline's stages read and edit it (Body), and the answers, chunks, messages, tool calls and
// usage objects the gateway reads from upstreams and writes to clients.
//
// It is pure (no net/http, no pipeline) and reads and writes JSON on internal/jsonwire, the
// project's one JSON foundation. The writers are hand-written, not encoding/json over tagged
// structs, because the gateway's writers must keep the bytes their clients have always seen and
// those differ by place: the fingerprint's position (Options.FingerprintLast), the escaping
// (Options.Esc), a typed or a passed-through usage (Usage.Raw). Each writer is pinned by a test to
// json.Marshal of the struct it replaced. The decoders (DecodeChunk, DecodeCompletion, and
// DecodeCompletionText and DecodeCompletionChunk for Granite's stage, which reads fewer members
// and so must not fail on a bad one it never read) read what their former readers read and give
// encoding/json's results: a jsonwire fast path for the usual answer, and the former struct, kept
// as a mirror, for anything else.
//
// The Body view keeps an unedited request's bytes exactly as the client sent them, so a model
// without stages forwards without parsing; an edited body is encoded once, before the upstream
// call, in one documented layout (members sorted by name, values verbatim).
package openaiwire
