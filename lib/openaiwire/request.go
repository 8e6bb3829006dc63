package openaiwire

import "encoding/json"

// IncludeUsage reports whether a request's stream_options value asks for the closing usage chunk
// ({"include_usage": true}), read as encoding/json reads it into a struct (a member name in any
// case; a value of another type is false). A malformed value asks for nothing: the stages that
// answer a stream themselves (a cache hit, Granite's replay, token input) then send no usage
// chunk, and the upstream, when it sees the request, words its own error.
func IncludeUsage(streamOptions []byte) bool {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	_ = json.Unmarshal(streamOptions, &so)
	return so.IncludeUsage
}
