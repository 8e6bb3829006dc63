package engines

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testSequencer(idle time.Duration) *sequencer {
	return newSequencer("m", &inference.ModelSequenceBatching{
		MaxSequenceIdleMicroseconds: uint64(idle / time.Microsecond),
		ControlInput: []*inference.ModelSequenceBatching_ControlInput{
			{Name: "START", Control: []*inference.ModelSequenceBatching_Control{{Kind: inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START, Int32FalseTrue: []int32{0, 1}}}},
			{Name: "CORRID", Control: []*inference.ModelSequenceBatching_Control{{Kind: inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID, DataType: inference.DataType_TYPE_UINT64}}},
		},
	}, true)
}

func TestSequenceIdleTimeoutForgetsSequence(t *testing.T) {
	s := testSequencer(time.Second)
	t0 := time.Unix(1000, 0)
	id := CorrelationID{Uint: 42}
	require.NoError(t, s.admit(&Request{Sequence: Sequence{ID: id, Start: true}}, t0))
	require.NoError(t, s.admit(&Request{Sequence: Sequence{ID: id}}, t0.Add(900*time.Millisecond)), "within the idle window")
	err := s.admit(&Request{Sequence: Sequence{ID: id}}, t0.Add(2*time.Second))
	require.Error(t, err, "idle past max_sequence_idle: the sequence is gone")
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	assert.Contains(t, err.Error(), "must specify the START flag")
}

func TestSequenceControlsInjected(t *testing.T) {
	s := testSequencer(0)
	req := &Request{Sequence: Sequence{ID: CorrelationID{Uint: 7}, Start: true}}
	require.NoError(t, s.admit(req, time.Now()))
	start, corr := req.Input("START"), req.Input("CORRID")
	require.NotNil(t, start)
	require.NotNil(t, corr)
	assert.Equal(t, []int64{1, 1}, start.Shape, "batched models get a batch dimension")
	assert.Equal(t, []int32{1}, tensor.View[int32](start.Data))
	assert.Equal(t, []uint64{7}, tensor.View[uint64](corr.Data))

	req = &Request{Sequence: Sequence{ID: CorrelationID{Uint: 7}}}
	require.NoError(t, s.admit(req, time.Now()))
	assert.Equal(t, []int32{0}, tensor.View[int32](req.Input("START").Data))

	err := s.admit(&Request{Sequence: Sequence{ID: CorrelationID{Text: "abc"}, Start: true}}, time.Now())
	require.Error(t, err, "a string id cannot fill a UINT64 CORRID control")
}

func TestSequenceSweepDropsAbandoned(t *testing.T) {
	s := testSequencer(time.Second)
	t0 := time.Unix(1000, 0)
	for i := range 255 {
		require.NoError(t, s.admit(&Request{Sequence: Sequence{ID: CorrelationID{Uint: uint64(i + 1)}, Start: true}}, t0))
	}
	require.Len(t, s.active, 255)
	require.NoError(t, s.admit(&Request{Sequence: Sequence{ID: CorrelationID{Uint: 9999}, Start: true}}, t0.Add(time.Hour)))
	assert.Len(t, s.active, 1, "the 256th start swept the idle sequences")
}

func TestSequenceNeedsBatchSizeOne(t *testing.T) {
	s := testSequencer(0)
	req := &Request{Inputs: []Tensor{{Name: "INPUT", Shape: []int64{2, 1}}}, Sequence: Sequence{ID: CorrelationID{Uint: 1}, Start: true}}
	err := s.admit(req, time.Now())
	require.Error(t, err)
	assert.Equal(t, "inference request to model 'm' must specify batch-size 1 due to requirements of sequence batcher", err.(*connect.Error).Message())
	assert.Empty(t, s.active, "a refused request starts no sequence")
}

func TestSequenceRefusedRequestLeavesNoState(t *testing.T) {
	s := testSequencer(0)
	err := s.admit(&Request{Sequence: Sequence{ID: CorrelationID{Text: "abc"}, Start: true}}, time.Now())
	require.Error(t, err)
	assert.Empty(t, s.active, "the CORRID error came before the sequence was recorded")
}
