package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTranslate: any body is translated to valid JSON or refused with a 400; nothing panics, and
// nothing encoding/json calls invalid is accepted. Whatever the decoder's storage holds (lists
// read from the body instead), the outcome is the same.
func FuzzTranslate(f *testing.F) {
	for _, tc := range requestPairs {
		f.Add([]byte(tc.in), false)
	}
	for _, tc := range refusals {
		f.Add([]byte(tc.in), true)
	}
	f.Add(deepInput(70), false)           // nested past the old limit of 64
	f.Add([]byte(mixedRequest(5)), false) // every kind of list, nested
	f.Add(oneLetterBlocks(maxPooled+3), false)
	f.Fuzz(func(t *testing.T, body []byte, count bool) {
		want := result(body, count, maxPooled)
		for _, store := range []int{0, 2} {
			if got := result(body, count, store); got != want {
				t.Fatalf("storing %d: %s, storing %d: %s", maxPooled, want, store, got)
			}
		}
		tr, err := translate(body, count)
		if err != nil {
			if err.status != 400 || err.typ != "invalid_request_error" || err.msg == "" {
				t.Fatalf("refusal %+v", err)
			}
			return
		}
		if !json.Valid(tr.body) {
			t.Fatalf("invalid output %s", tr.body)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if tr.estimate < 0 {
			t.Fatal("negative estimate")
		}
	})
}

// FuzzStream: any upstream bytes, cut anywhere, become a well-formed event sequence: message_start
// and ping, then blocks opened and stopped in order, ending in message_delta and message_stop or
// in one error event; every data line valid JSON; output bounded by the input.
func FuzzStream(f *testing.F) {
	for _, tc := range streamPairs {
		f.Add([]byte(tc.in), uint8(7))
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"x\",\"function\":{\"name\":\"n\",\"arguments\":\"{}\"}}]}}]}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, cut uint8) {
		s := newStreamer("msg_1", "m", 3)
		s.start()
		var out strings.Builder
		step := int(cut%64) + 1
		for i := 0; i < len(raw); i += step {
			s.write(raw[i:min(i+step, len(raw))])
			out.Write(s.out)
			s.out = s.out[:0]
		}
		s.end()
		out.Write(s.out)
		// Each input byte yields at most a bounded amount of output (a one-byte content delta is
		// a ~90-byte event; block starts and the end add a constant).
		if out.Len() > 2048+200*len(raw) {
			t.Fatalf("%d bytes out for %d in", out.Len(), len(raw))
		}
		checkSequence(t, out.String())
	})
}

func checkSequence(t *testing.T, stream string) {
	t.Helper()
	evs := strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n")
	open := -1
	next := 0
	for i, ev := range evs {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		name = strings.TrimPrefix(name, "event: ")
		if !ok || strings.Contains(data, "\n") || !json.Valid([]byte(data)) {
			t.Fatalf("event %d malformed: %q", i, ev)
		}
		var d struct {
			Type  string `json:"type"`
			Index *int   `json:"index"`
		}
		if err := json.Unmarshal([]byte(data), &d); err != nil || d.Type != name {
			t.Fatalf("event %d: name %q, type %q", i, name, d.Type)
		}
		last := i == len(evs)-1
		switch {
		case i == 0:
			if name != "message_start" {
				t.Fatalf("starts with %s", name)
			}
			continue
		case i == 1:
			if name != "ping" {
				t.Fatalf("second event %s", name)
			}
			continue
		}
		switch name {
		case "error":
			if !last {
				t.Fatal("events after an error")
			}
		case "content_block_start":
			if open >= 0 || *d.Index != next {
				t.Fatalf("block %d started with %d open, next %d", *d.Index, open, next)
			}
			open, next = next, next+1
		case "content_block_delta":
			if open < 0 || *d.Index != open {
				t.Fatalf("delta for %d, open %d", *d.Index, open)
			}
		case "content_block_stop":
			if open < 0 || *d.Index != open {
				t.Fatalf("stop for %d, open %d", *d.Index, open)
			}
			open = -1
		case "message_delta":
			if open >= 0 || i != len(evs)-2 || !strings.HasSuffix(evs[len(evs)-1], `{"type":"message_stop"}`) {
				t.Fatalf("message_delta out of place")
			}
		case "message_stop":
			if !last {
				t.Fatal("events after message_stop")
			}
		default:
			t.Fatalf("unexpected event %s", name)
		}
	}
	if lastName := evs[len(evs)-1]; !strings.HasPrefix(lastName, "event: message_stop") && !strings.HasPrefix(lastName, "event: error") {
		t.Fatalf("ends with %q", lastName)
	}
}

// FuzzCompletion: any upstream answer becomes a valid message or a 502.
func FuzzCompletion(f *testing.F) {
	for _, tc := range responsePairs {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeCompletion(body)
		if err != nil {
			if err.status != 502 {
				t.Fatalf("status %d", err.status)
			}
			return
		}
		if b := appendMessage(nil, "msg_1", "m", m); !json.Valid(b) {
			t.Fatalf("invalid message %s", b)
		}
		checkSequence(t, string(appendMessageEvents(nil, "msg_1", "m", m, 1)))
	})
}

// TestWordAtATime: the string writer's 8-bytes-at-a-time path writes what the byte-at-a-time one
// would, for every byte at every offset of a word (it is jsonwire's AppendContents, Minimal).
func TestWordAtATime(t *testing.T) {
	for c := range 256 {
		for at := range 20 {
			b := []byte(strings.Repeat("a", 20))
			b[at] = byte(c)
			var slow []byte // what appendStringInner writes, rune by rune (too short for words)
			for i := 0; i < len(b); {
				_, n := utf8.DecodeRune(b[i:])
				slow = appendStringInner(slow, string(b[i:i+n]))
				i += n
			}
			if got := appendStringInner(nil, string(b)); string(got) != string(slow) {
				t.Fatalf("appendStringInner: byte %#x at %d: %q, want %q", c, at, got, slow)
			}
		}
	}
}
