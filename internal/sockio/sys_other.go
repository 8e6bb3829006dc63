//go:build !(linux || darwin)

package sockio

const supported = false

func read(uintptr, []byte) (int, error)  { panic("sockio: not supported here") }
func write(uintptr, []byte) (int, error) { panic("sockio: not supported here") }
func peek(uintptr, []byte) (int, error)  { panic("sockio: not supported here") }
