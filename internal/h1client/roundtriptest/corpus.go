package roundtriptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Outcome is what a client made of one raw response: RoundTrip's error, or the response and what
// its body read before it ended.
type Outcome struct {
	Err              error
	Status           int
	Proto            string
	Header           http.Header
	ContentLength    int64
	TransferEncoding []string
	Body             string
	BodyErr          error // what ended the body, nil at io.EOF
	Trailer          http.Header
}

func (o Outcome) String() string {
	if o.Err != nil {
		return fmt.Sprintf("error %v", o.Err)
	}
	return fmt.Sprintf("%d %s header %v length %d te %v body %q (error %v) trailer %v",
		o.Status, o.Proto, o.Header, o.ContentLength, o.TransferEncoding, o.Body, o.BodyErr, o.Trailer)
}

// Exchange sends one small POST, as the proxy sends a chat request, through a client newRT makes
// to an upstream that answers it with raw and then closes its side of the connection, and returns
// what the client made of the answer.
func Exchange(t *testing.T, newRT NewRoundTripper, raw []byte) Outcome {
	addr := serveOnce(t, raw)
	rt := newRT(t, addr)
	defer rt.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := post(t, rt, ctx, addr, "/v1/chat/completions")
	if err != nil {
		if ctx.Err() != nil {
			t.Fatalf("no answer in 20 s to a response the upstream wrote whole: %q", raw)
		}
		return Outcome{Err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if ctx.Err() != nil {
		t.Fatalf("no end in 20 s to a body the upstream wrote whole: %q", raw)
	}
	return Outcome{Status: res.StatusCode, Proto: res.Proto, Header: res.Header, ContentLength: res.ContentLength,
		TransferEncoding: res.TransferEncoding, Body: string(b), BodyErr: err, Trailer: res.Trailer}
}

// Agree fails t unless got, a client's Outcome, is ref, http.Transport's: both fail, or both
// return the same response (status, protocol, header, length, transfer encoding, trailer) whose
// body reads the same bytes and ends the same way (io.EOF or an error). Error texts may differ.
// Where f.RefusesUnaskedUpgrade, a 101 in ref must be an error in got.
func Agree(t *testing.T, f Features, raw []byte, ref, got Outcome) {
	t.Helper()
	if f.RefusesUnaskedUpgrade && ref.Err == nil && ref.Status == http.StatusSwitchingProtocols {
		if got.Err == nil {
			t.Errorf("an unasked 101 was returned: %v\nresponse %q", got, raw)
		}
		return
	}
	if (ref.Err != nil) != (got.Err != nil) || (ref.BodyErr != nil) != (got.BodyErr != nil) {
		t.Errorf("the client: %v\nhttp.Transport: %v\nresponse %q", got, ref, raw)
		return
	}
	if ref.Err != nil {
		return
	}
	r, g := ref, got
	r.BodyErr, g.BodyErr = nil, nil
	if !reflect.DeepEqual(r, g) {
		t.Errorf("the client: %v\nhttp.Transport: %v\nresponse %q", got, ref, raw)
	}
}

// ReadCorpus reads the inputs of a fuzz target taking one []byte from its corpus directory,
// testdata/fuzz/FuzzName: file name -> input.
func ReadCorpus(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	in := make(map[string][]byte, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		v, err := parseCorpusFile(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		in[e.Name()] = v
	}
	return in, nil
}

// parseCorpusFile reads a corpus file of one []byte: "go test fuzz v1" and a line []byte("...")
// as Go's fuzzing writes it (with %q).
func parseCorpusFile(s string) ([]byte, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 2 || strings.TrimSpace(lines[0]) != "go test fuzz v1" {
		return nil, errors.New("not a go test fuzz v1 file of one value")
	}
	v := strings.TrimSpace(lines[1])
	quoted, ok := strings.CutPrefix(v, "[]byte(")
	if !ok || !strings.HasSuffix(quoted, ")") {
		return nil, fmt.Errorf("not a []byte value: %.40q", v)
	}
	u, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
	if err != nil {
		return nil, fmt.Errorf("%.40q: %w", v, err)
	}
	return []byte(u), nil
}

// testCorpus replays f.Corpus: every response there reads the same through the client as through
// http.Transport.
func testCorpus(t *testing.T, newRT NewRoundTripper, f Features) {
	in, err := ReadCorpus(f.Corpus)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) == 0 {
		t.Fatalf("%s: no inputs", f.Corpus)
	}
	for name, raw := range in {
		t.Run(name, func(t *testing.T) {
			Agree(t, f, raw, Exchange(t, NetHTTPRoundTripper, raw), Exchange(t, newRT, raw))
		})
	}
}
