package batcher

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// rowsOf is a validated request's batch size: the first dimension of its inputs (Validate made
// them agree), or -1 when it has no batched input and so cannot be merged.
func rowsOf(r *engines.Request) int64 {
	if len(r.Inputs) == 0 || len(r.Inputs[0].Shape) == 0 {
		return -1
	}
	return r.Inputs[0].Shape[0]
}

// compatible reports whether b can join a batch whose first request is a: the same inputs in
// the same order with the same datatypes and the same dimensions after the batch dimension, the
// same requested outputs, and no custom parameters or sequence fields (a merged request could
// carry only one set of them).
func compatible(a, b *engines.Request) bool {
	if len(a.Inputs) != len(b.Inputs) || !slices.Equal(a.Outputs, b.Outputs) ||
		len(a.Parameters) != 0 || len(b.Parameters) != 0 || !b.Sequence.ID.IsZero() {
		return false
	}
	for i := range a.Inputs {
		x, y := &a.Inputs[i], &b.Inputs[i]
		if x.Name != y.Name || x.Datatype != y.Datatype || len(x.Shape) != len(y.Shape) || len(x.Shape) == 0 ||
			!slices.Equal(x.Shape[1:], y.Shape[1:]) {
			return false
		}
	}
	return true
}

// merge concatenates compatible requests along the batch dimension. KServe's raw form is
// row-major, BYTES elements included, so each merged input is the requests' data end to end.
// One request is returned as it is, without copies.
func merge(reqs []*engines.Request) *engines.Request {
	if len(reqs) == 1 {
		return reqs[0]
	}
	first := reqs[0]
	m := &engines.Request{Outputs: first.Outputs, Inputs: make([]engines.Tensor, len(first.Inputs))}
	for i := range first.Inputs {
		var rows int64
		n := 0
		for _, r := range reqs {
			rows += r.Inputs[i].Shape[0]
			n += len(r.Inputs[i].Data)
		}
		data := make([]byte, 0, n)
		for _, r := range reqs {
			data = append(data, r.Inputs[i].Data...)
		}
		shape := slices.Clone(first.Inputs[i].Shape)
		shape[0] = rows
		m.Inputs[i] = engines.Tensor{Name: first.Inputs[i].Name, Datatype: first.Inputs[i].Datatype, Shape: shape, Data: data}
	}
	return m
}

// split cuts a batch's response into one response per request, rows[i] rows each, in order.
// Every output must carry the batch dimension with the batch's total rows; a model that answers
// otherwise fails every request of the batch. The parts alias res's data.
func split(res *engines.Response, rows []int64) ([]*engines.Response, error) {
	if len(rows) == 1 {
		return []*engines.Response{res}, nil
	}
	var total int64
	for _, n := range rows {
		if n < 0 || n > math.MaxInt32 {
			return nil, fmt.Errorf("batch size %d out of range", n)
		}
		total += n
	}
	parts := make([]*engines.Response, len(rows))
	for i := range parts {
		parts[i] = &engines.Response{Outputs: make([]engines.Tensor, len(res.Outputs)), Parameters: res.Parameters, Final: res.Final}
	}
	for j := range res.Outputs {
		out := &res.Outputs[j]
		if len(out.Shape) == 0 || out.Shape[0] != total {
			return nil, fmt.Errorf("output '%s' has shape %v, which does not start with the batch's size %d", out.Name, out.Shape, total)
		}
		offs, err := boundaries(out, rows)
		if err != nil {
			return nil, err
		}
		for i, n := range rows {
			shape := slices.Clone(out.Shape)
			shape[0] = n
			parts[i].Outputs[j] = engines.Tensor{Name: out.Name, Datatype: out.Datatype, Shape: shape,
				Data: out.Data[offs[i]:offs[i+1]:offs[i+1]]}
		}
	}
	return parts, nil
}

// boundaries returns the byte offset where each request's rows start in t's data, and the end,
// checking that the data holds exactly the rows of t's shape: fixed-size elements by arithmetic,
// BYTES by walking their length prefixes. Its memory is one offset per request whatever the
// shape claims.
func boundaries(t *engines.Tensor, rows []int64) ([]int, error) {
	var total int64
	for _, n := range rows {
		total += n
	}
	offs := make([]int, len(rows)+1)
	per := int64(1) // elements per row
	for _, d := range t.Shape[1:] {
		// With rows to fill, every element takes a byte at least: a row cannot have more
		// elements than the data has bytes (which also keeps per from overflowing).
		if d < 0 || (total > 0 && d > 0 && per > int64(len(t.Data))/d) {
			return nil, fmt.Errorf("output '%s' has an impossible shape %v for %d bytes", t.Name, t.Shape, len(t.Data))
		}
		per *= d
	}
	if per == 0 || total == 0 {
		if len(t.Data) != 0 {
			return nil, fmt.Errorf("output '%s' has shape %v but %d bytes", t.Name, t.Shape, len(t.Data))
		}
		return offs, nil
	}
	if t.Datatype == inference.DataType_TYPE_STRING {
		pos := 0
		for i, n := range rows {
			offs[i] = pos
			// Each element takes at least 4 bytes, so a claim beyond the data fails here before
			// any walking.
			if n > int64(len(t.Data)-pos)/4/per+1 {
				return nil, fmt.Errorf("output '%s' has fewer elements than its shape %v", t.Name, t.Shape)
			}
			for range n * per {
				if len(t.Data)-pos < 4 {
					return nil, fmt.Errorf("output '%s' ends inside a BYTES element", t.Name)
				}
				l := binary.LittleEndian.Uint32(t.Data[pos:])
				if uint64(l) > uint64(len(t.Data)-pos-4) {
					return nil, fmt.Errorf("output '%s' has a BYTES element longer than its data", t.Name)
				}
				pos += 4 + int(l)
			}
		}
		offs[len(rows)] = pos
		if pos != len(t.Data) {
			return nil, fmt.Errorf("output '%s' has %d bytes after its last element", t.Name, len(t.Data)-pos)
		}
		return offs, nil
	}
	size := int64(tensor.ElementSize(t.Datatype))
	if size <= 0 {
		return nil, fmt.Errorf("output '%s' has datatype %s, which cannot be split", t.Name, tensor.Name(t.Datatype))
	}
	rowBytes := per * size
	n := int64(len(t.Data))
	if (total == 0 && n != 0) || (total != 0 && (n%total != 0 || n/total != rowBytes)) {
		return nil, fmt.Errorf("output '%s' has %d bytes, which do not hold shape %v", t.Name, len(t.Data), t.Shape)
	}
	var row int64
	for i, n := range rows {
		offs[i] = int(row * rowBytes)
		row += n
	}
	offs[len(rows)] = len(t.Data)
	return offs, nil
}
