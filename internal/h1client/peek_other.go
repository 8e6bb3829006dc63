//go:build !(linux || darwin)

package h1client

import "net"

// Supported reports whether a Transport reuses connections here: without a way to peek at an
// idle socket it never does, so cleartext upstreams had better stay on http.Transport.
const Supported = false

type peeker struct{}

func (*peeker) init(net.Conn) {}

func (*peeker) alive() bool { return false }
