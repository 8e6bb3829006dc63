package suite

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// shmChecks hold Triton's system shared memory extension to its protocol: a region is
// registered on a POSIX shared memory object the suite creates, so they need the suite to run on
// the server's host (elsewhere they skip: the server cannot open the object).
func shmChecks() []Check {
	const doc = "protocol/extension_shared_memory.md"
	return []Check{
		{ID: "shm.register", Title: "a registered system shared memory region is listed by status with its key, offset and size, and is gone after unregister", Class: TritonExtension, Cite: triton(doc, "After a region is registered it can be used in the “shared_memory_region” parameter for an input or output tensor."), Run: func(t *T) {
			r := t.shmRegion(64)
			st, err := t.client().SystemSharedMemoryStatus(t.ctx, &inference.SystemSharedMemoryStatusRequest{Name: r.name})
			t.expectOK(err, "SystemSharedMemoryStatus of the registered region")
			got := st.GetRegions()[r.name]
			if got.GetKey() != r.key || got.GetOffset() != 0 || got.GetByteSize() != 64 {
				t.Fail(fmt.Sprintf("status of '%s': key %s, offset 0, byte_size 64", r.name, r.key), fmt.Sprintf("%v", st.GetRegions()))
			}
			r.unregister(t)
			_, err = t.client().SystemSharedMemoryStatus(t.ctx, &inference.SystemSharedMemoryStatusRequest{Name: r.name})
			t.expectRefusal(err, "SystemSharedMemoryStatus of an unregistered region", codes.NotFound, "Unable to find system shared memory region")
			t.Note("region '%s' on %s", r.name, r.key)
		}},
		{ID: "shm.double-register", Title: "registering a region name twice is refused (ALREADY_EXISTS)", Class: TritonExtension, Cite: triton(doc, "The OK code indicates success and other codes indicate failure."), Run: func(t *T) {
			r := t.shmRegion(64)
			_, err := t.client().SystemSharedMemoryRegister(t.ctx, &inference.SystemSharedMemoryRegisterRequest{Name: r.name, Key: r.key, ByteSize: 64})
			s, _ := status.FromError(err)
			switch s.Code() {
			case codes.OK:
				t.Fail("a second register of '"+r.name+"' refused", "OK")
			case codes.AlreadyExists:
			default:
				t.Warn("a second register of '%s': %s (Triton: ALREADY_EXISTS)", r.name, describeErr(err))
			}
		}},
		{ID: "shm.infer", Title: "inputs read from and outputs written to a region give the outputs of the same request in the message, and the response carries no data for them", Class: TritonExtension, Cite: triton(doc, "When these parameters are set for a requested output tensor the “contents” field of the ModelInferResponse::InferOutputTensor will not be set in the inference response."), Run: func(t *T) {
			m := t.generic()
			plain := t.mustInfer(validRequest(m))
			req := validRequest(m)
			size := 0
			for _, b := range req.RawInputContents {
				size += len(b)
			}
			outSizes := make([]int, len(plain.GetOutputs()))
			for i := range plain.GetOutputs() {
				d, err := outputData(plain, i)
				if err != nil {
					t.Skip("model '%s' output '%s' has no data to compare: %v", m.name, plain.GetOutputs()[i].GetName(), err)
				}
				outSizes[i] = len(d)
				size += len(d)
			}
			if size == 0 {
				t.Skip("model '%s' has nothing to move through shared memory", m.name)
			}
			r := t.shmRegion(size)
			off := 0
			for i, in := range req.Inputs {
				copy(r.mem[off:], req.RawInputContents[i])
				in.Parameters = shmParams(r.name, off, len(req.RawInputContents[i]))
				off += len(req.RawInputContents[i])
			}
			req.RawInputContents = nil
			r.sync(t)
			outStart := off
			for i, o := range plain.GetOutputs() {
				req.Outputs = append(req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o.GetName(), Parameters: shmParams(r.name, off, outSizes[i])})
				off += outSizes[i]
			}
			res, err := t.infer(req)
			t.expectOK(err, fmt.Sprintf("ModelInfer on '%s' through shared memory", m.name))
			if len(res.GetRawOutputContents()) > 0 {
				for i, b := range res.GetRawOutputContents() {
					if len(b) > 0 {
						t.Fail("no raw_output_contents for outputs written to shared memory", fmt.Sprintf("output %d has %d bytes", i, len(b)))
					}
				}
			}
			mem := r.read(t)
			off = outStart
			for i, o := range plain.GetOutputs() {
				want, _ := outputData(plain, i)
				if got := mem[off : off+outSizes[i]]; !bytes.Equal(want, got) {
					t.Fail(fmt.Sprintf("output '%s' in the region equal to the in-message call's (%d bytes)", o.GetName(), len(want)),
						fmt.Sprintf("first difference at byte %d", firstDiff(want, got)))
				}
				off += outSizes[i]
			}
			t.Note("model '%s': %d inputs and %d outputs in one %d-byte region", m.name, len(req.Inputs), len(outSizes), size)
		}},
		{ID: "shm.unknown-region", Title: "a tensor naming a region that is not registered is refused (NOT_FOUND)", Class: TritonExtension, Cite: triton(doc, "Shared memory regions must be created by the client and then registered with Triton before they can be referenced with a “shared_memory_region” parameter."), Run: func(t *T) {
			t.requireExtension("system_shared_memory")
			m := t.generic()
			req := validRequest(m)
			if len(req.Inputs) == 0 {
				t.Skip("model '%s' has no inputs", m.name)
			}
			req.Inputs[0].Parameters = shmParams("conformance-never-registered", 0, len(req.RawInputContents[0]))
			req.RawInputContents = req.RawInputContents[1:]
			_, err := t.infer(req)
			t.expectRefusal(err, "ModelInfer naming an unregistered region", codes.NotFound, "Unable to find shared memory region")
		}},
		{ID: "shm.out-of-bounds", Title: "an offset past a region's end is refused (INVALID_ARGUMENT)", Class: TritonExtension, Cite: triton(doc, "\"shared_memory_offset\" : int64 value is the offset, in bytes, into the region where the data for the tensor starts."), Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			if len(req.Inputs) == 0 || len(req.RawInputContents[0]) == 0 {
				t.Skip("model '%s' has no input with data", m.name)
			}
			r := t.shmRegion(len(req.RawInputContents[0]))
			req.Inputs[0].Parameters = shmParams(r.name, len(r.mem), len(req.RawInputContents[0]))
			req.RawInputContents = req.RawInputContents[1:]
			_, err := t.infer(req)
			t.expectRefusal(err, "ModelInfer with an offset at a region's end", codes.InvalidArgument, "Invalid offset")
		}},
	}
}

// shmParams are a tensor's shared memory parameters.
func shmParams(region string, offset, size int) map[string]*inference.InferParameter {
	p := map[string]*inference.InferParameter{
		"shared_memory_region":    inferParam(region),
		"shared_memory_byte_size": inferParam(int64(size)),
	}
	if offset != 0 {
		p["shared_memory_offset"] = inferParam(int64(offset))
	}
	return p
}

var shmSeq atomic.Int64

// shmObject is a POSIX shared memory object the suite created and registered as one region.
type shmObject struct {
	name, key, file string
	mem             []byte
}

// shmRegion creates a size-byte object under /dev/shm and registers it whole; the check skips
// where the suite cannot create one or the server cannot open it (another host). The object is
// removed when the check ends.
func (t *T) shmRegion(size int) *shmObject {
	t.requireExtension("system_shared_memory")
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("this host has no /dev/shm: the suite cannot create a shared memory object")
	}
	n := shmSeq.Add(1)
	r := &shmObject{name: fmt.Sprintf("conformance-region-%d-%d", os.Getpid(), n), mem: make([]byte, size)}
	r.key = fmt.Sprintf("/conformance_%d_%d", os.Getpid(), n)
	r.file = "/dev/shm" + r.key
	if err := os.WriteFile(r.file, r.mem, 0o600); err != nil {
		t.Skip("creating a shared memory object: %v", err)
	}
	t.cleanup(func() {
		// Quietly: the check may have unregistered the region itself, or the server gone.
		_, _ = t.client().SystemSharedMemoryUnregister(t.ctx, &inference.SystemSharedMemoryUnregisterRequest{Name: r.name})
		os.Remove(r.file)
	})
	_, err := t.client().SystemSharedMemoryRegister(t.ctx, &inference.SystemSharedMemoryRegisterRequest{Name: r.name, Key: r.key, ByteSize: uint64(size)})
	if s, _ := status.FromError(err); err != nil && s.Code() == codes.Internal {
		t.Skip("the server cannot open the suite's shared memory object (is it on another host?): %s", describeErr(err))
	}
	t.expectOK(err, fmt.Sprintf("SystemSharedMemoryRegister of '%s' (%d bytes of %s)", r.name, size, r.key))
	return r
}

// sync writes the object's bytes as the check has set them.
func (r *shmObject) sync(t *T) {
	if err := os.WriteFile(r.file, r.mem, 0o600); err != nil {
		t.Failf("writing the shared memory object %s: %v", r.key, err)
	}
}

// read is the object's bytes as the server left them.
func (r *shmObject) read(t *T) []byte {
	b, err := os.ReadFile(r.file)
	if err != nil {
		t.Failf("reading the shared memory object %s: %v", r.key, err)
	}
	return b
}

func (r *shmObject) unregister(t *T) {
	_, err := t.client().SystemSharedMemoryUnregister(t.ctx, &inference.SystemSharedMemoryUnregisterRequest{Name: r.name})
	t.expectOK(err, fmt.Sprintf("SystemSharedMemoryUnregister of '%s'", r.name))
}
