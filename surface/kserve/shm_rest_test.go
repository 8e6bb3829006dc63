//go:build linux

package kserve_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shmInputJSON and shmOutputJSON are what Triton's HTTP client sends after set_shared_memory
// (an output also carries binary_data false).
func shmInputJSON(name, datatype, region string, size, offset int) string {
	s := fmt.Sprintf(`{"name":%q,"shape":[1,16],"datatype":%q,"parameters":{"shared_memory_region":%q,"shared_memory_byte_size":%d`, name, datatype, region, size)
	if offset != 0 {
		s += fmt.Sprintf(`,"shared_memory_offset":%d`, offset)
	}
	return s + "}}"
}

func shmOutputJSON(name, region string, size, offset int) string {
	s := fmt.Sprintf(`{"name":%q,"parameters":{"binary_data":false,"shared_memory_region":%q,"shared_memory_byte_size":%d`, name, region, size)
	if offset != 0 {
		s += fmt.Sprintf(`,"shared_memory_offset":%d`, offset)
	}
	return s + "}}"
}

func registerBody(key string, offset, size int) string {
	return fmt.Sprintf(`{"key":%q,"offset":%d,"byte_size":%d}`, key, offset, size)
}

// simple_http_shm_client over both HTTP versions.
func TestSharedMemorySimpleREST(t *testing.T) {
	t.Parallel()
	srv := start(t)
	for i, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			in, out := newClientRegion(t, 128), newClientRegion(t, 128)
			copy(in.mem, tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })))
			copy(in.mem[64:], tensor.Bytes(seq(16, func(int) int32 { return 1 })))
			inName, outName := fmt.Sprintf("input_data_%d", i), fmt.Sprintf("output_data_%d", i)
			require.Equal(t, http.StatusOK, p.post(t, "/v2/cudasharedmemory/unregister", "").status)
			require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/"+outName+"/register", registerBody(out.key, 0, 128)).status)
			require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/"+inName+"/register", registerBody(in.key, 0, 128)).status)

			body := `{"inputs":[` + shmInputJSON("INPUT0", "INT32", inName, 64, 0) + `,` + shmInputJSON("INPUT1", "INT32", inName, 64, 64) +
				`],"outputs":[` + shmOutputJSON("OUTPUT0", outName, 64, 0) + `,` + shmOutputJSON("OUTPUT1", outName, 64, 64) + `]}`
			r := p.post(t, "/v2/models/simple/infer", body)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.JSONEq(t, `{"model_name":"simple","model_version":"1","outputs":[`+
				`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16]},{"name":"OUTPUT1","datatype":"INT32","shape":[1,16]}]}`, string(r.body))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i + 1) }), int32s(out.mem[:64]))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i - 1) }), int32s(out.mem[64:]))

			r = p.get(t, "/v2/systemsharedmemory/region/"+inName+"/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.JSONEq(t, fmt.Sprintf(`[{"name":%q,"key":%q,"offset":0,"byte_size":128}]`, inName, in.key), string(r.body))
			r = p.get(t, "/v2/systemsharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			var all []map[string]any
			require.NoError(t, json.Unmarshal(r.body, &all))
			assert.Len(t, all, 2)

			require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/"+inName+"/unregister", "").status)
			requireRESTError(t, p.get(t, "/v2/systemsharedmemory/region/"+inName+"/status"), http.StatusNotFound,
				"Unable to find system shared memory region: '"+inName+"'")
			require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/unregister", "").status)
			r = p.get(t, "/v2/systemsharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "[]", string(r.body))
			r = p.get(t, "/v2/cudasharedmemory/status")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "[]", string(r.body))
		})
	}
}

func TestSharedMemoryErrorsREST(t *testing.T) {
	t.Parallel()
	srv := start(t)
	p := restPeers(srv)[0]
	in, out := newClientRegion(t, 128), newClientRegion(t, 128)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/in/register", registerBody(in.key, 0, 128)).status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/out/register", registerBody(out.key, 0, 128)).status)

	reg := "/v2/systemsharedmemory/region/x/register"
	for _, c := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/v2/systemsharedmemory/region/in/register", registerBody(in.key, 0, 128), 400, "shared memory region 'in' already in manager"},
		{reg, `{"offset":0,"byte_size":8}`, 400, "Shared memory register request has no 'key' field"},
		{reg, ``, 400, "Shared memory register request has no 'key' field"},
		{reg, `{"key":"/k"}`, 400, "Shared memory register request has no 'byte_size' field"},
		{reg, `{"key":"/k","byte_size":-1}`, 400, "Unable to parse 'byte_size': expected a non-negative integer, got -1"},
		{reg, `{"key":7,"byte_size":1}`, 400, "Unable to parse 'key': expected a string, got 7"},
		{reg, registerBody("/../../etc/passwd", 0, 8), 400, "cannot register shared memory region 'x' - invalid shm key '/../../etc/passwd'"},
		{reg, registerBody("/infergate_no_such_object", 0, 8), 500, "Unable to open shared memory region: '/infergate_no_such_object'"},
		{reg, registerBody(in.key, 64, 65), 400, "failed to register shared memory region 'x': invalid args"},
		{"/v2/cudasharedmemory/region/g/register", `{"raw_handle":{"b64":""},"device_id":0,"byte_size":8}`, 501,
			"infergate does not implement the cuda_shared_memory extension: this build has no GPU support, so CUDA IPC handles cannot be opened; use system shared memory"},
	} {
		requireRESTError(t, p.post(t, c.path, c.body), c.status, c.msg)
	}
	requireRESTError(t, p.get(t, reg), http.StatusMethodNotAllowed, "Method Not Allowed")
	requireRESTError(t, p.post(t, "/v2/systemsharedmemory/status", ""), http.StatusMethodNotAllowed, "Method Not Allowed")

	outs := `],"outputs":[` + shmOutputJSON("OUTPUT0", "out", 64, 0) + `]}`
	in1 := shmInputJSON("INPUT1", "INT32", "in", 64, 64)
	for _, c := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"unknown region", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "nope", 64, 0) + `,` + in1 + outs, 404, "Unable to find shared memory region: 'nope'"},
		{"offset past the end", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 64, 128) + `,` + in1 + outs, 400, "Invalid offset for shared memory region: 'in'"},
		{"window past the end", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 64, 100) + `,` + in1 + outs, 400, "Invalid offset + byte size for shared memory region: 'in'"},
		{"size mismatch", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 32, 0) + `,` + in1 + outs, 400,
			"input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 32"},
		{"negative size", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", -1, 0) + `,` + in1 + outs, 400,
			"Unable to parse 'shared_memory_byte_size': expected a non-negative integer, got -1"},
		{"region not a string", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":1,"shared_memory_byte_size":64}},` + in1 + outs, 400,
			"Unable to parse 'shared_memory_region': expected a string, got 1"},
		{"data too", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[1],"parameters":{"shared_memory_region":"in","shared_memory_byte_size":64}},` + in1 + outs, 400,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'shared_memory_region' (input 'INPUT0' of model 'simple')"},
		{"output binary too", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 64, 0) + `,` + in1 +
			`],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true,"shared_memory_region":"out","shared_memory_byte_size":64}}]}`, 400,
			"Output can't set both 'shared_memory_region' and 'binary_data'"},
		{"output classification too", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 64, 0) + `,` + in1 +
			`],"outputs":[{"name":"OUTPUT0","parameters":{"classification":1,"shared_memory_region":"out","shared_memory_byte_size":64}}]}`, 400,
			"Output can't set both 'shared_memory_region' and 'classification'"},
		{"output window too small", `{"inputs":[` + shmInputJSON("INPUT0", "INT32", "in", 64, 0) + `,` + in1 +
			`],"outputs":[` + shmOutputJSON("OUTPUT0", "out", 16, 0) + `]}`, 500,
			"shared memory size specified with the request for output 'OUTPUT0' (16 bytes) should be at least 64 bytes to hold the results"},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireRESTError(t, p.post(t, "/v2/models/simple/infer", c.body), c.status, c.msg)
		})
	}
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/unregister", "").status)
	assert.Zero(t, srv.Gateway.SharedMemory().Mapped())
}

// simple_http_shm_string_client: BYTES in shared memory over REST, one output in the region and
// one returned as JSON.
func TestSharedMemoryStringsREST(t *testing.T) {
	t.Parallel()
	srv := start(t)
	p := restPeers(srv)[0]
	serialize := func(vals []int32) []byte {
		var b []byte
		for _, v := range vals {
			s := strconv.Itoa(int(v))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
			b = append(b, s...)
		}
		return b
	}
	in0 := serialize(seq(16, func(i int) int32 { return int32(i) }))
	in1 := serialize(seq(16, func(int) int32 { return 1 }))
	sum := serialize(seq(16, func(i int) int32 { return int32(i + 1) }))
	rin, rout := newClientRegion(t, len(in0)+len(in1)), newClientRegion(t, len(sum))
	copy(rin.mem, in0)
	copy(rin.mem[len(in0):], in1)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/sin/register", registerBody(rin.key, 0, len(in0)+len(in1))).status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/systemsharedmemory/region/sout/register", registerBody(rout.key, 0, len(sum))).status)
	body := `{"inputs":[` + shmInputJSON("INPUT0", "BYTES", "sin", len(in0), 0) + `,` + shmInputJSON("INPUT1", "BYTES", "sin", len(in1), len(in0)) +
		`],"outputs":[` + shmOutputJSON("OUTPUT0", "sout", len(sum), 0) + `,{"name":"OUTPUT1","parameters":{"binary_data":false}}]}`
	r := p.post(t, "/v2/models/simple_string/infer", body)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.Equal(t, sum, rout.mem)
	var resp struct {
		Outputs []struct {
			Name string
			Data []string
		}
	}
	require.NoError(t, json.Unmarshal(r.body, &resp))
	require.Len(t, resp.Outputs, 2)
	assert.Nil(t, resp.Outputs[0].Data)
	assert.Equal(t, "-1", resp.Outputs[1].Data[0])
}
