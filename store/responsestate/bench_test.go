package responsestate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/responsestate"
)

// benchRecord is a stored response of a conversation some turns in: a Response of about 2 KB,
// 20 input items and 40 context items of about 330 bytes each (Size 22 KB).
func benchRecord(id string) *responsestate.Record {
	item := func(role string, i int) json.RawMessage {
		text := strings.Repeat("lorem ipsum ", 21)
		return json.RawMessage(fmt.Sprintf(`{"type":"message","role":%q,"content":[{"type":"input_text","text":"%d %s"}]}`, role, i, text))
	}
	r := &responsestate.Record{
		ID: id, Owner: "key-1", Model: "llama-3.1-70b-instruct", CreatedAt: time.Now(),
		Response: json.RawMessage(`{"id":"` + id + `","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"` +
			strings.Repeat("dolor sit amet ", 130) + `"}]}]}`),
	}
	for i := range 20 {
		r.Input = append(r.Input, item("user", i))
	}
	for i := range 40 {
		r.Context = append(r.Context, item([]string{"user", "assistant"}[i%2], i))
	}
	return r
}

// BenchmarkGet is a previous_response_id lookup, one caller at a time (c=1), of a record of
// benchRecord's size. The targets: in-process under 20 µs, Redis (loopback) under 1 ms.
//
//	go test -run '^$' -bench BenchmarkGet -benchmem -count 5 ./store/responsestate/
//
// Measured (-count 5) on a shared 2-core VM (another engineer's builds running: load 2.5),
// redis-server 7.0.15 on loopback, a 22 KB record (Size):
//
//	memory  (10,000 records held)   89-165 ns/op        0 B/op    0 allocs/op
//	redis   (one record)            85-165 µs/op   51 KB/op      13 allocs/op
//
// Redis's bytes are the reply and the decoder's copy of it (the record's values are slices of
// that copy), about 22 KB each.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, s responsestate.Store, ids []string) {
		first := benchRecord(ids[0])
		for _, id := range ids { // sharing the first one's values: only the map's size matters
			r := *first
			r.ID = id
			if err := s.Put(ctx, &r); err != nil {
				b.Fatal(err)
			}
		}
		i := 0
		for b.Loop() {
			if _, err := s.Get(ctx, "key-1", ids[i%len(ids)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("memory", func(b *testing.B) {
		ids := make([]string, 10000)
		for i := range ids {
			ids[i] = fmt.Sprintf("resp_%08d", i)
		}
		run(b, responsestate.NewMemory(responsestate.MemoryOptions{}), ids)
	})
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, responsestate.NewRedis(srv.NewClient(b), responsestate.RedisOptions{}), []string{"resp_00000000"})
	})
}
