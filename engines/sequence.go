package engines

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// defaultSequenceIdle is Triton's default max_sequence_idle_microseconds (1 s).
const defaultSequenceIdle = time.Second

// sequencer tracks the live sequences of one sequence-batching model and turns each request's
// sequence flags into the control tensors named in the model's config, as Triton's sequence
// batcher does, so models compute from plain inputs.
type sequencer struct {
	model    string
	idle     time.Duration
	batched  bool
	controls []control

	mu     sync.Mutex
	active map[CorrelationID]time.Time
	admits int
}

type control struct {
	name string
	kind inference.ModelSequenceBatching_Control_Kind
	dt   inference.DataType
	// off and on are the raw values for false and true (START, END, READY).
	off, on []byte
}

func newSequencer(model string, sb *inference.ModelSequenceBatching, batched bool) *sequencer {
	s := &sequencer{model: model, batched: batched, active: make(map[CorrelationID]time.Time)}
	s.idle = time.Duration(sb.GetMaxSequenceIdleMicroseconds()) * time.Microsecond
	if s.idle == 0 {
		s.idle = defaultSequenceIdle
	}
	for _, ci := range sb.GetControlInput() {
		for _, c := range ci.GetControl() {
			ctl := control{name: ci.GetName(), kind: c.GetKind(), dt: c.GetDataType()}
			switch {
			case len(c.GetInt32FalseTrue()) == 2:
				ctl.dt = inference.DataType_TYPE_INT32
				ctl.off = tensor.Bytes(c.GetInt32FalseTrue()[:1])
				ctl.on = tensor.Bytes(c.GetInt32FalseTrue()[1:])
			case len(c.GetFp32FalseTrue()) == 2:
				ctl.dt = inference.DataType_TYPE_FP32
				ctl.off = tensor.Bytes(c.GetFp32FalseTrue()[:1])
				ctl.on = tensor.Bytes(c.GetFp32FalseTrue()[1:])
			case len(c.GetBoolFalseTrue()) == 2:
				ctl.dt = inference.DataType_TYPE_BOOL
				ctl.off = []byte{b2u(c.GetBoolFalseTrue()[0])}
				ctl.on = []byte{b2u(c.GetBoolFalseTrue()[1])}
			}
			s.controls = append(s.controls, ctl)
		}
	}
	return s
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func (c CorrelationID) String() string {
	if c.Text != "" {
		return c.Text
	}
	return strconv.FormatUint(c.Uint, 10)
}

// admit checks the request against the live sequences, updates them, and appends the control
// tensors to req.Inputs.
func (s *sequencer) admit(req *Request, now time.Time) error {
	if s.batched {
		for i := range req.Inputs {
			if len(req.Inputs[i].Shape) > 0 && req.Inputs[i].Shape[0] != 1 {
				return connect.NewError(connect.CodeInvalidArgument,
					fmt.Errorf("inference request to model '%s' must specify batch-size 1 due to requirements of sequence batcher", s.model))
			}
		}
	}
	id := req.Sequence.ID
	if id.IsZero() {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("inference request to model '%s' must specify a non-zero or non-empty correlation ID", s.model))
	}
	// Build the control tensors first, so a request that cannot be served changes no state.
	controls, err := s.controlTensors(req.Sequence)
	if err != nil {
		return err
	}
	s.mu.Lock()
	last, live := s.active[id]
	if live && now.Sub(last) > s.idle {
		delete(s.active, id)
		live = false
	}
	if !live && !req.Sequence.Start {
		s.mu.Unlock()
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("inference request for sequence %s to model '%s' must specify the START flag on the first request of the sequence", id, s.model))
	}
	if req.Sequence.End {
		delete(s.active, id)
	} else {
		s.active[id] = now
		s.admits++
		if s.admits%256 == 0 {
			s.sweep(now)
		}
	}
	s.mu.Unlock()

	req.Inputs = append(req.Inputs, controls...)
	return nil
}

// controlTensors returns the control inputs the model's config names, for one request of seq.
func (s *sequencer) controlTensors(seq Sequence) ([]Tensor, error) {
	shape := []int64{1}
	if s.batched {
		shape = []int64{1, 1}
	}
	out := make([]Tensor, 0, len(s.controls))
	for _, c := range s.controls {
		t := Tensor{Name: c.name, Datatype: c.dt, Shape: shape}
		switch c.kind {
		case inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
			t.Data = pick(seq.Start, c)
		case inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
			t.Data = pick(seq.End, c)
		case inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
			t.Data = c.on
		case inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
			data, err := corrIDBytes(c.dt, seq.ID)
			if err != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("sequence %s for model '%s': %w", seq.ID, s.model, err))
			}
			t.Data = data
		default:
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func pick(v bool, c control) []byte {
	if v {
		return c.on
	}
	return c.off
}

func corrIDBytes(dt inference.DataType, id CorrelationID) ([]byte, error) {
	if dt == inference.DataType_TYPE_STRING {
		return tensor.JoinBytes([]string{id.String()}), nil
	}
	if id.Text != "" {
		return nil, fmt.Errorf("string correlation ID needs a TYPE_STRING CORRID control, the model's is %s", tensor.Name(dt))
	}
	switch dt {
	case inference.DataType_TYPE_UINT64:
		return tensor.Bytes([]uint64{id.Uint}), nil
	case inference.DataType_TYPE_INT64:
		return tensor.Bytes([]int64{int64(id.Uint)}), nil
	case inference.DataType_TYPE_UINT32:
		return tensor.Bytes([]uint32{uint32(id.Uint)}), nil
	case inference.DataType_TYPE_INT32:
		return tensor.Bytes([]int32{int32(id.Uint)}), nil
	}
	return nil, fmt.Errorf("unsupported CORRID data type %s", tensor.Name(dt))
}

// sweep drops sequences idle past the timeout so abandoned ones do not accumulate.
func (s *sequencer) sweep(now time.Time) {
	for id, last := range s.active {
		if now.Sub(last) > s.idle {
			delete(s.active, id)
		}
	}
}

func (s *sequencer) reset() {
	s.mu.Lock()
	clear(s.active)
	s.mu.Unlock()
}
