package responsestate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleRecords() []*Record {
	at := time.UnixMilli(1700000000123)
	return []*Record{
		{ID: "resp_1", Owner: "key-a", Model: "m", CreatedAt: at,
			Response: json.RawMessage(`{"id":"resp_1","output":[]}`),
			Input:    []json.RawMessage{json.RawMessage(`{"type":"message"}`), json.RawMessage("{ \"t\": \"<&>\" }\n")},
			Context:  []json.RawMessage{json.RawMessage(`"x"`)}},
		{ID: "r", CreatedAt: time.UnixMilli(minMillis)},
		{ID: strings.Repeat("i", 300), Owner: strings.Repeat("ö", 70), Model: "m:1", CreatedAt: time.UnixMilli(maxMillis),
			Response: json.RawMessage(strings.Repeat("x", 20000)), Input: []json.RawMessage{json.RawMessage("1")}},
		{ID: "resp_neg", Owner: "0:", CreatedAt: time.UnixMilli(-1), Context: []json.RawMessage{json.RawMessage("[]"), json.RawMessage("{}")}},
	}
}

func encode(t testing.TB, r *Record) []byte {
	t.Helper()
	size := encodedSize(r)
	data, err := encodeRecord(r, size)
	require.NoError(t, err)
	require.Len(t, data, size, "encodedSize")
	return data
}

// normal is r as decodeRecord returns it: empty values and lists nil, CreatedAt in
// milliseconds.
func normal(r *Record) *Record {
	c := *r
	c.CreatedAt = time.UnixMilli(r.CreatedAt.UnixMilli())
	if len(c.Response) == 0 {
		c.Response = nil
	}
	items := func(in []json.RawMessage) []json.RawMessage {
		if len(in) == 0 {
			return nil
		}
		out := make([]json.RawMessage, len(in))
		for i, it := range in {
			if len(it) > 0 {
				out[i] = it
			}
		}
		return out
	}
	c.Input, c.Context = items(r.Input), items(r.Context)
	return &c
}

func TestCodecRoundTrip(t *testing.T) {
	for _, r := range sampleRecords() {
		got, err := decodeRecord(encode(t, r))
		require.NoError(t, err, r.ID)
		assert.Equal(t, normal(r), got, r.ID)
	}
	for _, at := range []time.Time{time.Date(0, 12, 31, 23, 59, 59, 999e6, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		r := &Record{ID: "x", CreatedAt: at}
		_, err := encodeRecord(r, encodedSize(r))
		assert.Error(t, err, "created %v", at)
	}
}

// The decoded values are capped slices of the value: appending to one copies it rather than
// writing over the next.
func TestDecodeCapsValues(t *testing.T) {
	r, err := decodeRecord(encode(t, sampleRecords()[0]))
	require.NoError(t, err)
	_ = append(r.Input[0], "!!!!"...)
	assert.Equal(t, "{ \"t\": \"<&>\" }\n", string(r.Input[1]))
}

// fuzzRecord builds a record from fuzz bytes: each field a length byte, then that many bytes.
func fuzzRecord(data []byte) *Record {
	next := func() []byte {
		if len(data) == 0 {
			return nil
		}
		n := min(int(data[0]), len(data)-1)
		v := data[1 : 1+n]
		data = data[1+n:]
		return v
	}
	r := &Record{Owner: string(next()), ID: string(next()), Model: string(next())}
	var ms [8]byte
	copy(ms[:], next())
	span := uint64(maxMillis - minMillis + 1)
	r.CreatedAt = time.UnixMilli(minMillis + int64(binary.LittleEndian.Uint64(ms[:])%span))
	r.Response = next()
	for _, items := range []*[]json.RawMessage{&r.Input, &r.Context} {
		n := len(next())
		for range n {
			*items = append(*items, next())
		}
	}
	return r
}

// FuzzDecodeRecord holds the decoder to what it reads from Redis, which is untrusted: any bytes
// decode or fail with errCorrupt, never panic; a value decodes only if it is exactly its
// record's encoding; and a record built from the bytes comes back from its encoding.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		data := encode(f, r)
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	f.Add([]byte(""))
	f.Add([]byte("0:"))
	f.Add([]byte("3:abc1\x01x\x00\x02\x00\x00\x00"))
	f.Add([]byte("1:o1\x01x\x00\x00\x00\xff\xff\xff\xff\x0f\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(data)
		if err != nil {
			if !errors.Is(err, errCorrupt) || r != nil {
				t.Fatalf("decode: %v, %v", r, err)
			}
		} else if again := encode(t, r); !bytes.Equal(data, again) {
			t.Fatalf("re-encoded differs:\n%q\n%q", data, again)
		}

		in := fuzzRecord(data)
		got, err := decodeRecord(encode(t, in))
		if err != nil {
			t.Fatalf("the encoding of %+v: %v", in, err)
		}
		if !reflect.DeepEqual(normal(in), got) {
			t.Fatalf("decoded %+v, want %+v", got, normal(in))
		}
	})
}
