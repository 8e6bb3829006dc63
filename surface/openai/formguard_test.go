package openai

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http/httptest"
	"testing"
	"testing/iotest"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// models counts the parts mime/multipart reads as the field model, and whether it read the
// whole form.
func models(body []byte, boundary string) (n int, ok bool) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			return n, true
		}
		if err != nil {
			return n, false
		}
		if p.FormName() == "model" {
			n++
		}
		if _, err := io.Copy(io.Discard, p); err != nil {
			return n, false
		}
	}
}

// guardRead runs a formGuard over body split at cut (the head, then the rest read in pieces of
// step bytes) and returns what it passed on and its error.
func guardRead(body []byte, cut, step int, boundary string) ([]byte, *formGuard, error) {
	cut = min(cut, len(body))
	var rest io.Reader = bytes.NewReader(body[cut:])
	if step > 0 {
		rest = iotest.HalfReader(io.LimitReader(iotest.OneByteReader(rest), int64(len(body))))
		if step > 1 {
			rest = iotest.DataErrReader(bytes.NewReader(body[cut:]))
		}
	}
	g := newFormGuard(body[:cut], rest, boundary)
	out, err := io.ReadAll(g)
	return out, g, err
}

func testForm(fields ...string) []byte {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.SetBoundary("b0undary")
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "file" {
			fw, _ := mw.CreateFormFile("file", "a.wav")
			_, _ = fw.Write([]byte(fields[i+1]))
			continue
		}
		_ = mw.WriteField(fields[i], fields[i+1])
	}
	_ = mw.Close()
	return buf.Bytes()
}

// FuzzFormGuard: whatever a form holds and however it is cut into a head and reads, the guard
// passes on exactly the bytes after the head, or fails; and it fails on every form in which
// mime/multipart finds the field model twice, wherever the second one is.
func FuzzFormGuard(f *testing.F) {
	file := "RIFF\r\n--b0undaryX\r\n\n--b0undary \r\nname=\"model\"\r\n\r\n"
	f.Add(testForm("model", "whisper", "file", file, "language", "en"), 40, 0)
	f.Add(testForm("model", "whisper", "file", file, "model", "other"), 200, 1)
	f.Add(testForm("model", "whisper", "file", file, "MODEL", "other"), 100, 2)
	f.Add([]byte("--b0undary\r\nContent-Disposition: form-data;\r\n name=model\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name*=utf-8''%6dodel\r\n\r\nn\r\n--b0undary--\r\n"), 10, 1)
	f.Add([]byte("--b0undary\nContent-Disposition: form-data; name=\"model\"\n\nm\n--b0undary\nContent-Disposition: form-data; name=\"model\"\n\nn\n--b0undary--\n"), 60, 0)
	f.Fuzz(func(t *testing.T, body []byte, cut, step int) {
		if cut < 0 || step < 0 || step > 2 {
			return
		}
		out, _, err := guardRead(body, cut, step, "b0undary")
		if n, ok := models(body, "b0undary"); ok && n > 1 && err == nil {
			t.Fatalf("mime/multipart reads %d model fields; the guard passed the form", n)
		}
		if err == nil && !bytes.Equal(out, body[min(cut, len(body)):]) {
			t.Fatalf("passed on %q, not the rest %q", out, body[min(cut, len(body)):])
		}
	})
}

// TestFormGuard: the guard passes a form's bytes after its head as they were, and refuses a
// second model field (in any spelling a lenient parser would read as one) before passing on its
// header; a file named model, or content that only looks like a delimiter, is not one.
func TestFormGuard(t *testing.T) {
	big := string(bytes.Repeat([]byte("RIFF\r\n--b0undaryX\r\nname=\"model\"\r\n\r\n"), 5000))
	ok := map[string][]byte{
		"fields then file":  testForm("model", "whisper", "language", "en", "file", big),
		"file named model":  []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"model\"\r\n\r\nxx\r\n--b0undary--\r\n"),
		"delimiter-like":    []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n\r\n--b0undaryXYZ\r\nname=\"model\"\r\n\r\n\r\n--b0undary--\r\n"),
		"after the close":   []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary--\r\nname=\"model\"\r\n\r\n"),
		"no model anywhere": testForm("language", "en", "file", big),
	}
	for name, body := range ok {
		for _, cut := range []int{0, 10, 60, len(body) / 2} {
			for step := range 3 {
				out, _, err := guardRead(body, cut, step, "b0undary")
				require.NoError(t, err, "%s cut %d step %d", name, cut, step)
				require.Equal(t, body[cut:], out, "%s cut %d step %d", name, cut, step)
			}
		}
	}
	twice := map[string][]byte{
		"after the file":        testForm("model", "whisper", "file", big, "model", "other"),
		"upper case":            testForm("model", "whisper", "file", big, "MODEL", "other"),
		"folded":                append(testForm("model", "whisper", "file", big)[:0:0], []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data;\r\n\tname=\"model\"\r\n\r\nn\r\n--b0undary--\r\n")...),
		"RFC 2231":              []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name*=UTF-8''%6Dodel\r\n\r\nn\r\n--b0undary--\r\n"),
		"bare LF":               []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\n--b0undary\nContent-Disposition: form-data; name=model\n\nn\n--b0undary--\n"),
		"padding and escapes":   []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary \t\r\ncontent-disposition : form-data ; name = \"mo\\del\"\r\n\r\nn\r\n--b0undary--\r\n"),
		"in another header":     []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nX-Other: a; name=model\r\n\r\nn\r\n--b0undary--\r\n"),
		"header cut by the end": []byte("--b0undary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b0undary\r\nContent-Disposition: form-data; name=\"model\""),
	}
	for name, body := range twice {
		for _, cut := range []int{0, 60, 70} {
			for step := range 3 {
				out, _, err := guardRead(body, cut, step, "b0undary")
				var perr *pipeline.Error
				require.ErrorAs(t, err, &perr, "%s cut %d step %d", name, cut, step)
				assert.Equal(t, "duplicate_model", perr.Code)
				// Nothing of the second field's header went on.
				second := bytes.LastIndex(body, []byte("--b0undary"))
				if name != "header cut by the end" {
					second = bytes.LastIndex(body[:second], []byte("--b0undary"))
				}
				if cut <= second {
					assert.LessOrEqual(t, cut+len(out), second, "%s cut %d step %d: passed %q", name, cut, step, out)
				} else { // found in the head: nothing passes
					assert.Empty(t, out, "%s cut %d step %d", name, cut, step)
				}
			}
		}
	}
	// A header with no end, past 8 KiB: refused, not held without bound.
	long := append([]byte("--b0undary\r\nX: "), bytes.Repeat([]byte("a"), 20<<10)...)
	_, g, err := guardRead(long, 0, 0, "b0undary")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "8 KiB")
	assert.Less(t, cap(g.buf), 100<<10)
}

// TestReadFormStreams: a form whose model comes before the end of its head is streamed (the
// request holds the head and reads the rest from the client), one whose model comes after is
// spooled; a streamed form reads as the client sent it, once.
func TestReadFormStreams(t *testing.T) {
	p := &Proxy{opts: ProxyOptions{MaxBodyBytes: 1 << 20, FormMemoryBytes: 1 << 10, SpoolDir: t.TempDir()}}
	file := string(bytes.Repeat([]byte("x"), 8<<10))
	read := func(body []byte) (*pipeline.Request, func(), *pipeline.Error) {
		hr := httptest.NewRequest("POST", "/v1/audio/transcriptions", bytes.NewReader(body))
		hr.Header.Set("Content-Type", "multipart/form-data; boundary=b0undary")
		return p.readForm(hr, func(err error) *pipeline.Error { return pipeline.InvalidRequest("", "", err.Error()) })
	}
	body := testForm("model", "whisper", "stream", "true", "file", file)
	req, done, perr := read(body)
	require.Nil(t, perr)
	defer done()
	assert.False(t, req.FormResendable(), "streamed")
	assert.Equal(t, "whisper", req.Model())
	assert.True(t, req.Stream())
	rd, n, ok := req.FormBody("whisper-large")
	require.True(t, ok)
	// A reader handed out before the first read is superseded by the next one: only the newest
	// reads.
	rd2, _, ok := req.FormBody("whisper-large")
	require.True(t, ok)
	_, err := rd.Read(make([]byte, 10))
	assert.ErrorContains(t, err, "another endpoint")
	got, err := io.ReadAll(rd2)
	require.NoError(t, err)
	assert.Equal(t, bytes.Replace(body, []byte("whisper"), []byte("whisper-large"), 1), got)
	assert.EqualValues(t, len(got), n)
	assert.True(t, req.FormSent())
	_, _, ok = req.FormBody("whisper")
	assert.False(t, ok, "read once")

	spooled, done2, perr := read(testForm("file", file, "model", "whisper"))
	require.Nil(t, perr)
	defer done2()
	assert.True(t, spooled.FormResendable(), "the model after the head: spooled")
	assert.Equal(t, "whisper", spooled.Model())

	// Two model fields in the head: spooled, as any form naming its model after its head, and
	// routed on the last (the one Starlette's parser keeps).
	twice, done3, perr := read(testForm("model", "whisper", "file", "x", "model", "other", "file", file))
	require.Nil(t, perr)
	defer done3()
	assert.True(t, twice.FormResendable())
	assert.Equal(t, "other", twice.Model())
}
