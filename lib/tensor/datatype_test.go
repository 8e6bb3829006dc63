package tensor

import (
	"math"
	"math/big"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
)

// allDatatypes is every valid datatype with its wire name and element size (0: variable).
var allDatatypes = []struct {
	name string
	dt   inference.DataType
	size int
}{
	{"BOOL", inference.DataType_TYPE_BOOL, 1},
	{"UINT8", inference.DataType_TYPE_UINT8, 1},
	{"UINT16", inference.DataType_TYPE_UINT16, 2},
	{"UINT32", inference.DataType_TYPE_UINT32, 4},
	{"UINT64", inference.DataType_TYPE_UINT64, 8},
	{"INT8", inference.DataType_TYPE_INT8, 1},
	{"INT16", inference.DataType_TYPE_INT16, 2},
	{"INT32", inference.DataType_TYPE_INT32, 4},
	{"INT64", inference.DataType_TYPE_INT64, 8},
	{"FP16", inference.DataType_TYPE_FP16, 2},
	{"FP32", inference.DataType_TYPE_FP32, 4},
	{"FP64", inference.DataType_TYPE_FP64, 8},
	{"BYTES", inference.DataType_TYPE_STRING, 0},
	{"BF16", inference.DataType_TYPE_BF16, 2},
}

func TestDatatypes(t *testing.T) {
	// The 13 KServe datatypes plus Triton's BF16.
	assert.Len(t, allDatatypes, 14)
	for _, tc := range allDatatypes {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.dt, ParseDatatype(tc.name))
			assert.Equal(t, tc.name, Name(tc.dt))
			assert.Equal(t, tc.size, ElementSize(tc.dt))
			assert.True(t, Valid(tc.dt))
		})
	}
}

func TestInvalidDatatypes(t *testing.T) {
	for _, s := range []string{"FOO", "", "int32", "bytes", "STRING", "TYPE_INT32", "INT32 ", " INT32", "FP8", "BYTES\x00"} {
		t.Run(s, func(t *testing.T) {
			dt := ParseDatatype(s)
			assert.Equal(t, inference.DataType_TYPE_INVALID, dt)
			assert.False(t, Valid(dt))
			assert.Equal(t, "<invalid>", Name(dt))
			assert.Equal(t, 0, ElementSize(dt))
		})
	}
	for _, dt := range []inference.DataType{inference.DataType_TYPE_INVALID, -1, 15, 1000, math.MinInt32, math.MaxInt32} {
		assert.False(t, Valid(dt), "%d", dt)
		assert.Equal(t, "<invalid>", Name(dt), "%d", dt)
		assert.Equal(t, 0, ElementSize(dt), "%d", dt)
	}
}

func TestElementCount(t *testing.T) {
	cases := []struct {
		name  string
		shape []int64
		want  int64
		ok    bool
	}{
		{"scalar (empty shape)", nil, 1, true},
		{"empty non-nil shape", []int64{}, 1, true},
		{"one dim", []int64{16}, 16, true},
		{"batch", []int64{8, 16}, 128, true},
		{"three dims", []int64{2, 3, 4}, 24, true},
		{"zero dim", []int64{0}, 0, true},
		{"zero among others", []int64{4, 0, 7}, 0, true},
		{"negative dim", []int64{-1}, 0, false},
		{"negative among others", []int64{4, -1, 7}, 0, false},
		{"negative after zero", []int64{0, -2}, 0, false},
		{"negative before zero", []int64{-2, 0}, 0, false},
		{"min int64", []int64{math.MinInt64}, 0, false},
		{"overflow", []int64{1 << 40, 1 << 40}, 0, false},
		{"overflow with zero is zero", []int64{1 << 40, 1 << 40, 0}, 0, true},
		{"zero first then overflow", []int64{0, math.MaxInt64, math.MaxInt64}, 0, true},
		{"overflow wrapping to small", []int64{1 << 32, 1 << 32, 2}, 0, false}, // 2^65 wraps to 0
		{"wraps to two", []int64{3, 6148914691236517206}, 0, false},            // 2^64+2 wraps to 2
		{"max int64 squared", []int64{math.MaxInt64, math.MaxInt64}, 0, false},
		{"2^31 squared", []int64{1 << 31, 1 << 31}, 1 << 62, true},
		{"large but fine", []int64{1 << 20, 1 << 20, 1 << 20}, 1 << 60, true},
		{"many ones", []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ok := ElementCount(tc.shape)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, n)
		})
	}
}

// TestElementCountNeverWraps checks the contract against exact arithmetic: whenever ElementCount
// reports ok, the count is the exact product; an exact product beyond int64 is never ok; and a
// product up to 2^62 (the implementation's conservative bound) is always ok.
func TestElementCountNeverWraps(t *testing.T) {
	dims := []int64{0, 1, 2, 3, 7, 255, 1 << 16, 1<<31 - 1, 1 << 31, 1 << 32, 1<<62 + 1, 1 << 62, math.MaxInt64}
	limit := new(big.Int).Lsh(big.NewInt(1), 62)
	maxInt := big.NewInt(math.MaxInt64)
	for _, a := range dims {
		for _, b := range dims {
			for _, c := range []int64{1, 2, 3, 1 << 31} {
				shape := []int64{a, b, c}
				exact := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
				exact.Mul(exact, big.NewInt(c))
				n, ok := ElementCount(shape)
				if ok {
					assert.Equal(t, exact.Int64(), n, "%v", shape)
					assert.True(t, exact.IsInt64(), "%v", shape)
				}
				if exact.Cmp(maxInt) > 0 {
					assert.False(t, ok, "%v overflows int64 but was accepted as %d", shape, n)
				}
				if exact.Cmp(limit) <= 0 {
					assert.True(t, ok, "%v = %s should be accepted", shape, exact)
				}
			}
		}
	}
}
