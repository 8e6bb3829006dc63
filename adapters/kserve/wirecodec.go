package kserve

import (
	"fmt"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// zeroCopyThreshold is the message size from which tensorCodec stops copying tensor payloads;
// below it the stock codec is as fast and pools its buffers.
const zeroCopyThreshold = 64 << 10

// Field numbers of the tensor payloads in Triton's messages.
const (
	fieldRawInputContents  protowire.Number = 7 // ModelInferRequest.raw_input_contents
	fieldRawOutputContents protowire.Number = 6 // ModelInferResponse.raw_output_contents
)

// tensorCodec is grpc-go's proto codec, except that large inference messages keep their tensor
// bytes where they are: a request's raw_input_contents alias the one buffer the message was read
// into (protobuf-go would copy every bytes field), and a response's raw_output_contents are sent
// from the model's own buffers instead of being copied into a marshalled message. For an identity
// model that is two fewer copies of the tensor per call.
type tensorCodec struct{ stock encoding.CodecV2 }

func newTensorCodec() tensorCodec { return tensorCodec{stock: encoding.GetCodecV2(grpcproto.Name)} }

func (tensorCodec) Name() string { return grpcproto.Name }

func (c tensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*inference.ModelInferRequest)
	if !ok || data.Len() < zeroCopyThreshold {
		return c.stock.Unmarshal(data, v)
	}
	// Materialize makes a buffer of our own (grpc-go recycles the pieces of data), which the
	// request's raw contents may then alias for as long as the request lives.
	return unmarshalInferRequest(data.Materialize(), req)
}

// unmarshalInferRequest decodes b into req like proto.Unmarshal, but with raw_input_contents
// aliasing b. Every other field goes through protobuf-go.
func unmarshalInferRequest(b []byte, req *inference.ModelInferRequest) error {
	var rest []byte
	var raw [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(n))
		}
		if num == fieldRawInputContents && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(m))
			}
			raw = append(raw, v[:len(v):len(v)])
			b = b[n+m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(m))
		}
		rest = append(rest, b[:n+m]...)
		b = b[n+m:]
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = append(req.RawInputContents, raw...)
	return nil
}

func (c tensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	res, ok := v.(*inference.ModelInferResponse)
	if !ok || rawSize(res.GetRawOutputContents()) < zeroCopyThreshold {
		return c.stock.Marshal(v)
	}
	return marshalInferResponse(res)
}

// marshalInferResponse encodes res as proto.Marshal would, with each raw output sent from its own
// buffer. Fields may appear in any order on the wire, so the raw outputs simply follow the rest.
// The response belongs to the call being answered, so setting its raw contents aside while the
// other fields are marshalled is safe.
func marshalInferResponse(res *inference.ModelInferResponse) (mem.BufferSlice, error) {
	raw := res.RawOutputContents
	res.RawOutputContents = nil
	head, err := proto.Marshal(res)
	res.RawOutputContents = raw
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 1+2*len(raw))
	out = append(out, mem.SliceBuffer(head))
	for _, r := range raw {
		tag := protowire.AppendTag(make([]byte, 0, 12), fieldRawOutputContents, protowire.BytesType)
		tag = protowire.AppendVarint(tag, uint64(len(r)))
		out = append(out, mem.SliceBuffer(tag))
		if len(r) > 0 {
			out = append(out, mem.SliceBuffer(r))
		}
	}
	return out, nil
}

func rawSize(raw [][]byte) int {
	n := 0
	for _, r := range raw {
		n += len(r)
	}
	return n
}
