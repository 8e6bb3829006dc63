//go:build cuda

package cuda

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// child is this test binary run again as another process, in a Triton client's role: the test
// writes commands to its stdin and reads the lines it prints. It ends when the test does.
type child struct {
	t     testing.TB
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startChild runs test again with env=1 set, which makes that test play the child.
func startChild(t testing.TB, test, env string) *child {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env+"=1")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	return &child{t: t, stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// next returns the rest of the child's next line that starts with prefix.
func (c *child) next(prefix string) string {
	c.t.Helper()
	for c.lines.Scan() {
		if v, ok := strings.CutPrefix(c.lines.Text(), prefix); ok {
			return v
		}
	}
	c.t.Fatalf("the child said no %q", prefix)
	return ""
}

// handle reads the IPC handle the child exported.
func (c *child) handle() []byte {
	c.t.Helper()
	h, err := hex.DecodeString(c.next("HANDLE "))
	require.NoError(c.t, err)
	return h
}

// say sends the child one command.
func (c *child) say(line string) {
	c.t.Helper()
	_, err := io.WriteString(c.stdin, line+"\n")
	require.NoError(c.t, err)
}

// exported is device memory the child exported; buf mirrors it.
type exported struct {
	d   *Device
	p   uintptr
	st  *stream
	buf []byte
}

// childFail ends the child on an error, which the test sees as a child that said nothing.
func childFail(err error) {
	fmt.Fprintln(os.Stderr, "child:", err)
	os.Exit(1)
}

// export, in the child, puts buf in fresh device memory on GPU 0 and prints its IPC handle.
func export(buf []byte) *exported {
	d, err := Open(0, Limits{})
	if err != nil {
		childFail(err)
	}
	e := &exported{d: d, buf: buf}
	if e.p, err = (deviceAlloc{d}).alloc(int64(len(buf))); err != nil {
		childFail(err)
	}
	if e.st, err = d.newStream(); err != nil {
		childFail(err)
	}
	e.sync(true)
	h, err := d.ipcHandle(e.p)
	if err != nil {
		childFail(err)
	}
	fmt.Println("HANDLE " + hex.EncodeToString(h))
	return e
}

// sync copies buf to the device memory (up) or the device memory to buf.
func (e *exported) sync(up bool) {
	err := e.d.run(func() error {
		var err error
		if up {
			err = e.st.upload(e.p, unsafe.Pointer(&e.buf[0]), len(e.buf))
		} else {
			err = e.st.download(unsafe.Pointer(&e.buf[0]), e.p, len(e.buf))
		}
		if err != nil {
			return err
		}
		return e.st.sync()
	})
	if err != nil {
		childFail(err)
	}
}
