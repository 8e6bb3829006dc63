//go:build !(linux || darwin)

package openai

import "net"

// h1Supported: without a way to peek at an idle socket, cleartext upstreams stay on http.Transport.
const h1Supported = false

type peeker struct{}

func (*peeker) init(net.Conn) {}

func (*peeker) alive() bool { return false }
