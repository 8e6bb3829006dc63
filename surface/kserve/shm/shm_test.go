//go:build linux

package shm_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var seq atomic.Int64

// object creates a shared memory object of size bytes and returns its key.
func object(t testing.TB, size int64) string {
	t.Helper()
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm on this host")
	}
	name := fmt.Sprintf("infergate_shm_test_%d_%d", os.Getpid(), seq.Add(1))
	f, err := os.OpenFile("/dev/shm/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	t.Cleanup(func() { os.Remove("/dev/shm/" + name) })
	return "/" + name
}

func TestRegisterUnregisterLeaksNothing(t *testing.T) {
	t.Parallel()
	m := shm.New(0)
	key := object(t, 4096)
	n := 10000
	if testing.Short() {
		n = 1000
	}
	for i := range n {
		name := fmt.Sprintf("r%d", i%7)
		require.NoError(t, m.Register("", name, key, uint64(i%4000), 17))
		v, err := m.Acquire("", name, 3, 10)
		require.NoError(t, err)
		require.NoError(t, v.Write([]byte("0123456789")))
		if i%2 == 0 {
			require.NoError(t, m.Unregister("", name))
			v.Release()
		} else {
			v.Release()
			require.NoError(t, m.Unregister("", name))
		}
	}
	assert.Zero(t, m.Mapped())
}

func TestCapOnRegions(t *testing.T) {
	t.Parallel()
	m := shm.New(3)
	key := object(t, 64)
	for i := range 3 {
		require.NoError(t, m.Register("", fmt.Sprint(i), key, 0, 8))
	}
	err := m.Register("", "x", key, 0, 8)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
	assert.Contains(t, err.Error(), "failed to register shared memory region 'x': the server holds the most regions it allows (3)")
	require.NoError(t, m.Unregister("", "0"))
	require.NoError(t, m.Register("", "x", key, 0, 8))
	assert.Equal(t, 3, m.Mapped())
}

// A region in use survives its unregistering until the request releases it; Close unregisters
// everything and refuses more.
func TestInFlightKeepsMapping(t *testing.T) {
	t.Parallel()
	m := shm.New(0)
	key := object(t, 64)
	require.NoError(t, m.Register("", "a", key, 0, 64))
	require.NoError(t, m.Register("", "b", key, 8, 8))
	v, err := m.Acquire("", "a", 0, 64)
	require.NoError(t, err)
	require.NoError(t, m.Close())
	assert.Equal(t, 1, m.Mapped(), "a is still in use")
	require.NoError(t, v.Write([]byte("still mapped")))
	got, err := v.ReadAll()
	require.NoError(t, err)
	assert.Equal(t, "still mapped", string(got[:12]))
	v.Release()
	v.Release() // twice is harmless
	assert.Zero(t, m.Mapped())
	err = m.Register("", "c", key, 0, 8)
	assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err))
	st, err := m.Status("", "")
	require.NoError(t, err)
	assert.Empty(t, st)
}

// Any offset works, page-aligned or not, and the window is exactly what was registered.
func TestUnalignedOffsets(t *testing.T) {
	t.Parallel()
	m := shm.New(0)
	key := object(t, 3*4096)
	f, err := os.OpenFile("/dev/shm"+key, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, off := range []int64{0, 1, 4095, 4096, 4097, 2*4096 + 13} {
		_, err := f.WriteAt([]byte(fmt.Sprintf("at%05d", off)), off)
		require.NoError(t, err)
		name := fmt.Sprint(off)
		require.NoError(t, m.Register("", name, key, uint64(off), 7))
		got, err := m.Read("", name, 0, 7)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("at%05d", off), string(got))
		_, err = m.Read("", name, 0, 8)
		assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	}
	require.NoError(t, m.UnregisterAll(""))
	assert.Zero(t, m.Mapped())
}

func TestConcurrentUseAndUnregister(t *testing.T) {
	t.Parallel()
	m := shm.New(0)
	key := object(t, 4096)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for j := range 50 {
				_ = m.Register("", fmt.Sprint(j%5), key, 0, 4096)
				if v, err := m.Acquire("", fmt.Sprint((i+j)%5), 0, 4096); err == nil {
					_, _ = v.ReadAll()
					v.Release()
				}
			}
		}()
		go func() {
			defer wg.Done()
			for j := range 50 {
				_ = m.Unregister("", fmt.Sprint((i*j)%5))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, m.UnregisterAll(""))
	assert.Zero(t, m.Mapped())
}

func TestValidKey(t *testing.T) {
	for key, want := range map[string]string{"/a": "a", "a": "a", "/input_simple": "input_simple"} {
		got, ok := shm.ValidKey(key)
		assert.True(t, ok, key)
		assert.Equal(t, want, got)
	}
	for _, key := range []string{"", "/", "//a", "/.", "/..", "..", "a/b", "/a/../b", "a\x00"} {
		_, ok := shm.ValidKey(key)
		assert.False(t, ok, key)
	}
}

// Owners are namespaces: one owner's regions are never found, listed or unregistered through
// another's calls, and both may use one name; the cap counts every owner's regions.
func TestOwnersAreNamespaces(t *testing.T) {
	t.Parallel()
	m := shm.New(3)
	key := object(t, 64)
	require.NoError(t, m.Register("alice", "r", key, 0, 64))
	st, err := m.Status("bob", "")
	require.NoError(t, err)
	assert.Empty(t, st)
	_, err = m.Status("bob", "r")
	assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	_, err = m.Acquire("bob", "r", 0, 8)
	assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	require.NoError(t, m.Register("bob", "r", key, 8, 8), "the same name in another namespace")
	require.NoError(t, m.UnregisterAll("bob"))
	require.NoError(t, m.Unregister("bob", "r"))
	st, err = m.Status("alice", "")
	require.NoError(t, err)
	require.Len(t, st, 1)
	assert.Equal(t, uint64(64), st[0].ByteSize)
	v, err := m.Acquire("alice", "r", 0, 64)
	require.NoError(t, err)
	v.Release()
	require.NoError(t, m.Register("bob", "a", key, 0, 8))
	require.NoError(t, m.Register("bob", "b", key, 0, 8))
	err = m.Register("carol", "c", key, 0, 8)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "the cap is the server's")
	require.NoError(t, m.Close())
	assert.Zero(t, m.Mapped())
}

// With ExclusiveObjects an object is its first registrant's while any of its mappings lives, an
// in-flight request's included: another owner naming it, by any name of the file, gets exactly
// the missing object's error, whatever window it asks for; so does an object that is no regular
// file. Without the option (keys off) any owner may register any object, as in Triton.
func TestExclusiveObjects(t *testing.T) {
	t.Parallel()
	m := shm.New(0, shm.ExclusiveObjects())
	key := object(t, 64)
	link := key + "_link"
	require.NoError(t, os.Link("/dev/shm"+key, "/dev/shm"+link))
	t.Cleanup(func() { os.Remove("/dev/shm" + link) })
	fifo := key + "_fifo"
	require.NoError(t, unix.Mkfifo("/dev/shm"+fifo, 0o600))
	t.Cleanup(func() { os.Remove("/dev/shm" + fifo) })
	missing := key + "_missing"

	require.NoError(t, m.Register("alice", "a", key, 0, 64))
	require.NoError(t, m.Register("alice", "b", link[1:], 8, 8), "the owner may map its object again, by any name")
	refused := func(when string) {
		t.Helper()
		for _, size := range []uint64{8, 1 << 20} {
			want := m.Register("bob", "x", missing, 0, size)
			require.Equal(t, connect.CodeInternal, connect.CodeOf(want))
			require.Equal(t, "internal: Unable to open shared memory region: '"+missing+"'", want.Error())
			for _, k := range []string{key, key[1:], link, fifo} {
				for _, name := range []string{"x", "a"} {
					err := m.Register("bob", name, k, 0, size)
					assert.Equal(t, connect.CodeInternal, connect.CodeOf(err), "%s: %s as %s, %d bytes", when, k, name, size)
					assert.Equal(t, strings.Replace(want.Error(), missing, k, 1), fmt.Sprint(err), "%s: %s as %s, %d bytes", when, k, name, size)
				}
			}
		}
		st, err := m.Status("bob", "")
		require.NoError(t, err)
		assert.Empty(t, st, when)
	}
	refused("alice holds two regions")

	v, err := m.Acquire("alice", "a", 0, 64)
	require.NoError(t, err)
	require.NoError(t, m.UnregisterAll("alice"))
	refused("alice's request still holds an unregistered region")
	require.NoError(t, v.Write([]byte("alice's output")), "the request writes into the region it holds")
	v.Release()
	assert.Zero(t, m.Mapped())

	require.NoError(t, m.Register("bob", "x", link, 0, 64), "free once alice's last mapping went")
	got, err := m.Read("bob", "x", 0, 14)
	require.NoError(t, err)
	assert.Equal(t, "alice's output", string(got))
	err = m.Register("alice", "a", key, 0, 64)
	assert.Equal(t, "internal: Unable to open shared memory region: '"+key+"'", fmt.Sprint(err), "now bob's")
	require.NoError(t, m.Close())
	assert.Zero(t, m.Mapped())

	open := shm.New(0)
	require.NoError(t, open.Register("alice", "a", key, 0, 64))
	require.NoError(t, open.Register("bob", "a", link, 0, 64), "without the option, Triton's model")
	require.NoError(t, open.Close())
}
