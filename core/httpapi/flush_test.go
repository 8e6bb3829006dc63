package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// failingWriter fails every write after the first n.
type failingWriter struct {
	*httptest.ResponseRecorder
	n int
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("client gone")
	}
	f.n--
	return f.ResponseRecorder.Write(p)
}

// An EventSender flushes each event, writes nothing after the client's first failure, and
// returns that failure from then on.
func TestEventSender(t *testing.T) {
	w := &failingWriter{ResponseRecorder: httptest.NewRecorder(), n: 1}
	var s EventSender
	if err := s.Send(w, []byte("a")); err != nil || !w.Flushed {
		t.Fatalf("first send: %v, flushed %v", err, w.Flushed)
	}
	if err := s.Send(w, nil); err != nil {
		t.Fatalf("an empty send: %v", err)
	}
	err := s.Send(w, []byte("b"))
	if err == nil || s.Err() != err {
		t.Fatalf("second send: %v, Err %v", err, s.Err())
	}
	w.n = 10
	if err2 := s.Send(w, []byte("c")); err2 != err || w.Body.String() != "a" {
		t.Fatalf("after the failure: %v, body %q", err2, w.Body.String())
	}
	var plain EventSender // a writer that cannot flush is written to all the same
	if err := plain.Send(struct{ http.ResponseWriter }{httptest.NewRecorder()}, []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// ServeInProcess reports an abort, answers nothing for it, and lets any other panic through.
func TestServeInProcess(t *testing.T) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if ServeInProcess(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), w, r) {
		t.Fatal("a handler that returned is not aborted")
	}
	if !ServeInProcess(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }), w, r) {
		t.Fatal("ErrAbortHandler is an abort")
	}
	defer func() {
		if v := recover(); v != "boom" {
			t.Fatalf("another panic: %v", v)
		}
	}()
	ServeInProcess(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }), w, r)
	t.Fatal("a panic other than ErrAbortHandler went unseen")
}
