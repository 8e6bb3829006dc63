//go:build linux

package app

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// With API keys on, a /dev/shm object belongs to the key that registered it first, while any of
// that key's regions (or a request using one) maps it: another key that names it, under any
// region name, by another name for the same file (a hard link), over REST or gRPC, gets exactly
// the answer a missing object gets, whatever window it asks for, so it can neither read nor
// overwrite the owner's bytes nor learn that the object exists. Once the owner has unregistered
// all its regions of the object, another key may register it. Before, a second key registered
// the first's object under its own region name, read its tensors and wrote over them as outputs,
// and "Unable to open" (missing) versus "invalid args" (too big a window) told which objects
// existed.
func TestSecuritySharedMemoryObjectOwnership(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("no /dev/shm on this host")
	}
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, secureConfig(t, up.URL, ""))
	base := "http://" + addr
	const a, b = secUserKey, secControlKey // two keys that may both use "simple"

	// A's object holds INPUT0 = 0..15 and INPUT1 = 1s; link is a hard link to it (the same file
	// under another name), missing names no object at all.
	object := fmt.Sprintf("infergate-sec-shm-%d", os.Getpid())
	link, missing := object+"-link", object+"-missing"
	mem := make([]byte, 128)
	for i := range 16 {
		binary.LittleEndian.PutUint32(mem[4*i:], uint32(i))
		binary.LittleEndian.PutUint32(mem[64+4*i:], 1)
	}
	require.NoError(t, os.WriteFile("/dev/shm/"+object, mem, 0o600))
	t.Cleanup(func() { os.Remove("/dev/shm/" + object) })
	require.NoError(t, os.Link("/dev/shm/"+object, "/dev/shm/"+link))
	t.Cleanup(func() { os.Remove("/dev/shm/" + link) })

	rest := func(key, method, path, body string) secResponse {
		t.Helper()
		return send(t, http.DefaultClient, method, base+path, []byte(body), "Authorization", "Bearer "+key, "Content-Type", "application/json")
	}
	registerREST := func(key, region, name string, size int) secResponse {
		t.Helper()
		return rest(key, "POST", "/v2/systemsharedmemory/region/"+region+"/register", fmt.Sprintf(`{"key":"/%s","offset":0,"byte_size":%d}`, name, size))
	}
	grpcClient := inference.NewGRPCInferenceServiceClient(dial(t, addr))
	grpcCtx := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
	}
	registerGRPC := func(key, region, name string, size uint64) *status.Status {
		_, err := grpcClient.SystemSharedMemoryRegister(grpcCtx(key), &inference.SystemSharedMemoryRegisterRequest{Name: region, Key: "/" + name, ByteSize: size})
		return status.Convert(err)
	}
	infer := func(key, in, out string) secResponse {
		t.Helper()
		return rest(key, "POST", "/v2/models/simple/infer", `{"inputs":[`+
			`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":"`+in+`","shared_memory_byte_size":64}},`+
			`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":"`+in+`","shared_memory_byte_size":64,"shared_memory_offset":64}}],`+
			`"outputs":[{"name":"OUTPUT0","parameters":{"shared_memory_region":"`+out+`","shared_memory_byte_size":64}}]}`)
	}

	r := registerREST(a, "a_in", object, 128)
	require.Equal(t, http.StatusOK, r.status, r.body)
	r = registerREST(a, "a_out", object, 64)
	require.Equal(t, http.StatusOK, r.status, "the owner may register its object again: %s", r.body)

	// notYours checks that B's attempts on A's object answer as a missing object does, byte for
	// byte but for the name, for a window that fits the object and one that does not.
	notYours := func(when string) {
		t.Helper()
		for _, size := range []int{64, 1 << 20} {
			want := registerREST(b, "x", missing, size)
			require.Equal(t, http.StatusInternalServerError, want.status, want.body)
			require.Equal(t, `{"error":"Unable to open shared memory region: '/`+missing+`'"}`, want.body)
			wantGRPC := registerGRPC(b, "x", missing, uint64(size))
			for _, name := range []string{object, link} {
				for _, region := range []string{"x", "a_in"} {
					got := registerREST(b, region, name, size)
					assert.Equal(t, want.status, got.status, "%s: REST %s as %s, %d bytes: %s", when, name, region, size, got.body)
					assert.Equal(t, strings.ReplaceAll(want.body, missing, name), got.body, "%s: REST %s as %s, %d bytes", when, name, region, size)
					g := registerGRPC(b, region, name, uint64(size))
					assert.Equal(t, wantGRPC.Code(), g.Code(), "%s: gRPC %s as %s, %d bytes: %s", when, name, region, size, g.Message())
					assert.Equal(t, strings.ReplaceAll(wantGRPC.Message(), missing, name), g.Message(), "%s: gRPC %s as %s, %d bytes", when, name, region, size)
				}
			}
		}
		st := rest(b, "GET", "/v2/systemsharedmemory/status", "")
		assert.JSONEq(t, `[]`, st.body, "%s: B registered nothing", when)
		// B cannot reach A's regions by name either (they are A's namespace).
		r := infer(b, "a_in", "a_out")
		assert.GreaterOrEqual(t, r.status, 400, r.body)
		assert.Contains(t, r.body, "Unable to find shared memory region: 'a_in'")
	}
	notYours("A holds two regions")

	r = infer(a, "a_in", "a_out")
	require.Equal(t, http.StatusOK, r.status, r.body)
	got, err := os.ReadFile("/dev/shm/" + object)
	require.NoError(t, err)
	for i := range 16 {
		assert.Equal(t, uint32(i+1), binary.LittleEndian.Uint32(got[4*i:]), "OUTPUT0 = INPUT0 + INPUT1 written by A's request")
	}

	r = rest(a, "POST", "/v2/systemsharedmemory/region/a_in/unregister", "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	notYours("A still holds one region")

	_, err = grpcClient.SystemSharedMemoryUnregister(grpcCtx(a), &inference.SystemSharedMemoryUnregisterRequest{})
	require.NoError(t, err, "A unregisters all its regions")
	r = registerREST(b, "b_in", link, 128)
	require.Equal(t, http.StatusOK, r.status, "free once A let go: %s", r.body)
	require.Equal(t, codes.OK, registerGRPC(b, "b_out", object, 128).Code(), "the same file under its own name")
	r = infer(b, "b_in", "b_out")
	require.Equal(t, http.StatusOK, r.status, r.body)

	// Now B owns it, and A gets the missing object's answer.
	r = registerREST(a, "a_in", object, 128)
	assert.Equal(t, http.StatusInternalServerError, r.status, r.body)
	assert.Equal(t, `{"error":"Unable to open shared memory region: '/`+object+`'"}`, r.body)
}
