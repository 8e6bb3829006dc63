package respcache

import "github.com/infergate/infergate/lib/chatstream"

// The stage assembles streamed answers to store them, and replays stored ones to streamed
// requests, with package chatstream.
type (
	assembler     = chatstream.Assembler
	replayOptions = chatstream.ReplayOptions
)

func newAssembler(path string, maxBytes int) *assembler {
	return chatstream.NewAssembler(path, maxBytes)
}

func replay(path string, resp []byte, o replayOptions) ([][]byte, error) {
	return chatstream.Replay(path, resp, o)
}
