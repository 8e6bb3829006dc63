package kvroute

import "github.com/infergate/infergate/upstream"

// PickerFor is the picker the stage gives a request whose prompt has hashes.
func PickerFor(x *Index, hashes []uint64) upstream.Picker { return &picker{x: x, hashes: hashes} }

// Done ends the request a picker routed.
func Done(p upstream.Picker) { p.(*picker).done() }
