package typed_test

import (
	"testing"

	"github.com/infergate/infergate/engines/typed"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNarrowRangeChecks(t *testing.T) {
	b, err := typed.Narrow[int32, int8]([]int32{-128, 0, 127}, "m", "OUT")
	require.NoError(t, err)
	assert.Equal(t, tensor.Bytes([]int8{-128, 0, 127}), b)
	_, err = typed.Narrow[int32, int8]([]int32{1, 128}, "m", "OUT")
	assert.EqualError(t, err, "model 'm' output 'OUT': element 1 (128) is out of range for its datatype")
	_, err = typed.Narrow[uint32, uint16]([]uint32{65536}, "m", "OUT")
	assert.Error(t, err)
	assert.Equal(t, []int32{-1, 2}, typed.Widen[int16, int32](tensor.Bytes([]int16{-1, 2})))
}

func TestShape(t *testing.T) {
	var dst [3]int64
	s, err := typed.Shape(dst[:0], []int64{-1, 4}, nil, 12, "m", "OUT")
	require.NoError(t, err)
	assert.Equal(t, []int64{3, 4}, s)
	s, err = typed.Shape(dst[:0], []int64{2, -1, 0}, nil, 0, "m", "OUT")
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 0, 0}, s)
	_, err = typed.Shape(dst[:0], []int64{-1, 4}, nil, 10, "m", "OUT")
	assert.EqualError(t, err, "model 'm' output 'OUT': 10 elements do not fit shape [-1,4]")
	_, err = typed.Shape(dst[:0], []int64{16}, nil, 15, "m", "OUT")
	assert.Error(t, err)
	s, err = typed.Shape(dst[:0], []int64{-1, -1}, []int64{2, 3}, 6, "m", "OUT")
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 3}, s)
	_, err = typed.Shape(dst[:0], []int64{-1, 3}, []int64{3, 2}, 6, "m", "OUT")
	assert.EqualError(t, err, "model 'm' output 'OUT': shape [3,2] does not fit 6 elements declared [-1,3]")
	_, err = typed.Shape(dst[:0], []int64{-1, -1}, nil, 6, "m", "OUT")
	assert.ErrorContains(t, err, "more than one variable dimension")
}

func TestRawAndBools(t *testing.T) {
	n, err := typed.Raw(make([]byte, 6), 2, "m", "OUT")
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	_, err = typed.Raw(make([]byte, 5), 2, "m", "OUT")
	assert.EqualError(t, err, "model 'm' output 'OUT': 5 bytes is not a whole number of 2-byte elements")
	assert.Equal(t, []bool{true, false, true}, typed.Bools([]byte{2, 0, 1}))
	assert.Equal(t, []byte{1, 0}, typed.BoolBytes([]bool{true, false}))
}
