package batcher

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// FuzzSplitMerge checks, for requests built from the input, that merging them and splitting an
// identity model's answer gives each request exactly its own rows back; and that split, fed an
// arbitrary (model-sent, so untrusted) output, never panics nor returns parts that do not hold
// what their shapes claim.
func FuzzSplitMerge(f *testing.F) {
	f.Add(byte(0), []byte{1, 2, 3}, []byte("abcdefghijklmnopqrstuvwxyz"), int64(2), int64(3))
	f.Add(byte(1), []byte{2, 0, 1}, []byte{3, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0}, int64(3), int64(1))
	f.Add(byte(2), []byte{1}, []byte{}, int64(0), int64(5))
	f.Add(byte(1), []byte{1, 1}, []byte{255, 255, 255, 255}, int64(2), int64(1<<40))
	f.Fuzz(func(t *testing.T, kind byte, rows []byte, data []byte, total, inner int64) {
		dtypes := []inference.DataType{inference.DataType_TYPE_INT32, inference.DataType_TYPE_STRING, inference.DataType_TYPE_FP16}
		dt := dtypes[int(kind)%len(dtypes)]
		if len(rows) > 16 {
			rows = rows[:16]
		}
		// Arbitrary output: must not panic, and parts must tile the data.
		var counts []int64
		for _, r := range rows {
			counts = append(counts, int64(r%5))
		}
		if len(counts) > 0 {
			out := engines.Tensor{Name: "OUT", Datatype: dt, Shape: []int64{total, inner}, Data: data}
			if parts, err := split(&engines.Response{Outputs: []engines.Tensor{out}}, counts); err == nil && len(counts) > 1 {
				var joined []byte
				for i, p := range parts {
					if p.Outputs[0].Shape[0] != counts[i] {
						t.Fatalf("part %d has %d rows, want %d", i, p.Outputs[0].Shape[0], counts[i])
					}
					joined = append(joined, p.Outputs[0].Data...)
				}
				if !bytes.Equal(joined, data) {
					t.Fatal("parts do not tile the output")
				}
			}
		}
		// Well-formed requests: merge then split must round-trip.
		const cols = 2
		var reqs []*engines.Request
		pos := 0
		for i, n := range counts {
			var d []byte
			for e := range n * cols {
				switch dt {
				case inference.DataType_TYPE_STRING:
					l := 0
					if pos < len(data) {
						l = int(data[pos] % 4)
					}
					d = binary.LittleEndian.AppendUint32(d, uint32(l))
					for k := range l {
						d = append(d, byte(i+k+int(e)))
					}
					pos++
				case inference.DataType_TYPE_FP16:
					d = append(d, byte(i), byte(e))
				default:
					d = binary.LittleEndian.AppendUint32(d, uint32(i<<8|int(e)))
				}
			}
			reqs = append(reqs, &engines.Request{Inputs: []engines.Tensor{{Name: "IN", Datatype: dt, Shape: []int64{n, cols}, Data: d}}})
		}
		if len(reqs) == 0 {
			return
		}
		m := merge(reqs)
		in := m.Inputs[0]
		parts, err := split(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: dt, Shape: in.Shape, Data: in.Data}}}, counts)
		if err != nil {
			t.Fatalf("split of a merged batch: %v", err)
		}
		for i, p := range parts {
			if !bytes.Equal(p.Outputs[0].Data, reqs[i].Inputs[0].Data) || p.Outputs[0].Shape[0] != counts[i] {
				t.Fatalf("request %d got rows %d %x, sent %x", i, p.Outputs[0].Shape[0], p.Outputs[0].Data, reqs[i].Inputs[0].Data)
			}
		}
	})
}
