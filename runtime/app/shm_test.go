//go:build linux

package app

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/infergate/infergate/stage/guard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With API keys on, each key's shared memory regions are its own: another key's requests can
// neither list, read, overwrite nor unregister them, and may use the same region names.
func TestSharedMemoryPerKey(t *testing.T) {
	t.Parallel()
	const alice, bob = "sk-shm-alice-7c1d", "sk-shm-bob-90ae"
	addr := serveYAML(t, fmt.Sprintf(`
auth:
  keys:
    - {name: alice, sha256: %s}
    - {name: bob, sha256: %s}
`, guard.HashKey(alice), guard.HashKey(bob)), io.Discard)

	// Alice's object holds INPUT0 = 0..15 and INPUT1 = 1s, for the built-in model "simple".
	object := fmt.Sprintf("infergate-runtime-test-%d", os.Getpid())
	mem := make([]byte, 128)
	for i := range 16 {
		binary.LittleEndian.PutUint32(mem[4*i:], uint32(i))
		binary.LittleEndian.PutUint32(mem[64+4*i:], 1)
	}
	require.NoError(t, os.WriteFile("/dev/shm/"+object, mem, 0o600))
	t.Cleanup(func() { os.Remove("/dev/shm/" + object) })

	call := func(key, method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	register := fmt.Sprintf(`{"key":"/%s","offset":0,"byte_size":128}`, object)
	infer := `{"inputs":[` +
		`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":"in","shared_memory_byte_size":64}},` +
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":"in","shared_memory_byte_size":64,"shared_memory_offset":64}}]}`

	code, body := call(alice, "POST", "/v2/systemsharedmemory/region/in/register", register)
	require.Equal(t, http.StatusOK, code, body)

	code, body = call(bob, "GET", "/v2/systemsharedmemory/status", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `[]`, body, "bob does not see alice's region")
	code, body = call(bob, "GET", "/v2/systemsharedmemory/region/in/status", "")
	assert.GreaterOrEqual(t, code, 400)
	assert.Contains(t, body, "Unable to find system shared memory region: 'in'")
	code, body = call(bob, "POST", "/v2/models/simple/infer", infer)
	assert.GreaterOrEqual(t, code, 400, "bob cannot read alice's region")
	assert.Contains(t, body, "Unable to find shared memory region: 'in'")

	code, body = call(bob, "POST", "/v2/systemsharedmemory/unregister", "")
	require.Equal(t, http.StatusOK, code, body)
	// Bob registers his own object: alice's is hers (TestSecuritySharedMemoryObjectOwnership).
	require.NoError(t, os.WriteFile("/dev/shm/"+object+"-bob", mem, 0o600))
	t.Cleanup(func() { os.Remove("/dev/shm/" + object + "-bob") })
	code, body = call(bob, "POST", "/v2/systemsharedmemory/region/in/register", fmt.Sprintf(`{"key":"/%s-bob","offset":0,"byte_size":128}`, object))
	require.Equal(t, http.StatusOK, code, "bob may use the same name: %s", body)
	code, body = call(bob, "POST", "/v2/systemsharedmemory/region/in/unregister", "")
	require.Equal(t, http.StatusOK, code, body)

	code, body = call(alice, "GET", "/v2/systemsharedmemory/status", "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"name":"in"`, "bob's unregister-all and unregister left alice's region")
	code, body = call(alice, "POST", "/v2/models/simple/infer", infer)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]`, "OUTPUT0 = INPUT0 + INPUT1 from alice's region")
}
