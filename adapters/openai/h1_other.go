//go:build !(linux || darwin)

package openai

import "net"

// h1Supported: without a way to peek at an idle socket, cleartext upstreams stay on http.Transport.
const h1Supported = false

func alive(net.Conn) bool { return false }
