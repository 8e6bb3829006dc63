//go:build linux

package kserve

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/kserve/shm"
)

// fuzzRegion registers region "r" of 64 bytes on a fresh manager.
func fuzzRegion(f *testing.F) *shm.Manager {
	if _, err := os.Stat("/dev/shm"); err != nil {
		f.Skip("no /dev/shm on this host")
	}
	name := fmt.Sprintf("infergate_fuzz_%d", os.Getpid())
	if err := os.WriteFile("/dev/shm/"+name, make([]byte, 64), 0o600); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.Remove("/dev/shm/" + name) })
	m := shm.New(0)
	if err := m.Register("", "r", "/"+name, 0, 64); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	return m
}

// FuzzSharedMemoryParams drives a tensor's shared memory parameters, as REST JSON, through the
// REST conversion, the shared parsing and the region's bounds check: nothing panics, every
// refusal is a status, and whatever is accepted lies inside the region.
func FuzzSharedMemoryParams(f *testing.F) {
	for _, s := range []string{
		`{"shared_memory_region":"r","shared_memory_byte_size":64}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":8,"shared_memory_offset":56}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":9,"shared_memory_offset":56}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":0,"shared_memory_offset":64}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":-1}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":18446744073709551615,"shared_memory_offset":9223372036854775807}`,
		`{"shared_memory_region":"nope","shared_memory_byte_size":1}`,
		`{"shared_memory_region":1,"shared_memory_byte_size":1}`,
		`{"shared_memory_offset":1}`,
		`{"shared_memory_region":"r"}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":"64"}`,
		`{"shared_memory_region":"r","shared_memory_byte_size":6.4e1}`,
	} {
		f.Add([]byte(s))
	}
	m := fuzzRegion(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var raw map[string]jsonValue
		if json.Unmarshal(body, &raw) != nil {
			return
		}
		params := map[string]*inference.InferParameter{}
		for k, v := range raw {
			switch k {
			case paramShmRegion, paramShmOffset, paramShmByteSize:
				p, err := shmParameter(k, v)
				if err != nil {
					requireCode(t, err, connect.CodeInvalidArgument)
					return
				}
				params[k] = p
			}
		}
		sp, err := parseShmParams("T", params)
		if err != nil {
			requireCode(t, err, connect.CodeInvalidArgument)
			return
		}
		if !sp.hasShm {
			return
		}
		v, err := m.Acquire("", sp.region, sp.offset, sp.size)
		if err != nil {
			if c := connect.CodeOf(err); c != connect.CodeInvalidArgument && c != connect.CodeNotFound {
				t.Fatalf("code %v: %v", c, err)
			}
			return
		}
		defer v.Release()
		if sp.region != "r" || sp.offset < 0 || sp.size < 0 || sp.offset+sp.size > 64 || v.Len() != int(sp.size) {
			t.Fatalf("accepted %+v outside the region", sp)
		}
		if _, err := v.ReadAll(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzSharedMemoryRegisterBody: a register body either parses or is refused with a status.
func FuzzSharedMemoryRegisterBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"key":"/k","offset":0,"byte_size":8}`, `{"key":"/k","byte_size":-1}`,
		`{"key":7,"byte_size":1}`, `{"key":"/k","offset":1e3,"byte_size":1}`, `[`, `{"key":null,"byte_size":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		key, _, _, err := parseShmRegisterBody(body)
		if err != nil {
			requireCode(t, err, connect.CodeInvalidArgument)
			return
		}
		if _, err := json.Marshal(key); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzCudaSharedMemoryRegisterBody: a CUDA register body either parses or is refused with
// INVALID_ARGUMENT; what parses, written back as Triton's client writes it, parses to the same.
func FuzzCudaSharedMemoryRegisterBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `[`, `null`,
		`{"raw_handle":{"b64":"AAECAw=="},"device_id":0,"byte_size":8}`,
		`{"raw_handle":{"b64":"AAECAw"},"device_id":1,"byte_size":8}`,
		`{"raw_handle":{"b64":""},"device_id":0,"byte_size":8}`,
		`{"raw_handle":{"b64":"not base64!"},"device_id":0,"byte_size":8}`,
		`{"raw_handle":"AAECAw==","device_id":0,"byte_size":8}`,
		`{"raw_handle":{"b64":7},"device_id":0,"byte_size":8}`,
		`{"raw_handle":{"b64":null},"device_id":0,"byte_size":8}`,
		`{"raw_handle":{"b64":"AAECAw=="},"device_id":-1,"byte_size":18446744073709551615}`,
		`{"raw_handle":{"b64":"AAECAw=="},"device_id":1e3,"byte_size":8}`,
		`{"raw_handle":{"b64":"AAECAw=="},"device_id":0,"byte_size":-8}`,
		`{"raw_handle":{"b64":"AAECAw=="},"byte_size":8}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		handle, device, size, err := parseCudaShmRegisterBody(body)
		if err != nil {
			requireCode(t, err, connect.CodeInvalidArgument)
			return
		}
		again := fmt.Sprintf(`{"raw_handle":{"b64":%q},"device_id":%d,"byte_size":%d}`, base64.StdEncoding.EncodeToString(handle), device, size)
		h2, d2, s2, err := parseCudaShmRegisterBody([]byte(again))
		if err != nil || !bytes.Equal(h2, handle) || d2 != device || s2 != size {
			t.Fatalf("%s parsed to %x %d %d, written back %s to %x %d %d (%v)", body, handle, device, size, again, h2, d2, s2, err)
		}
	})
}

func requireCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("code %v, want %v: %v", connect.CodeOf(err), code, err)
	}
}
