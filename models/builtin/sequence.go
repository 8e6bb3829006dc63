package builtin

import (
	"context"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// dynaSequence is Triton's `simple_dyna_sequence`, written by hand because its config needs what
// the tensor options do not declare: the oldest sequence strategy, two instances and a model
// parameter. The registry's sequence handling supplies the control inputs; the model computes
// OUTPUT = ((INPUT + START) + END * CORRID) * READY.
type dynaSequence struct {
	cfg *inference.ModelConfig
}

func newSimpleDynaSequence() *dynaSequence {
	cfg := baseConfig("simple_dyna_sequence", 8)
	cfg.Input = []*inference.ModelInput{{Name: "INPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}}
	cfg.Output = []*inference.ModelOutput{{Name: "OUTPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}}
	cfg.SchedulingChoice = &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{
		MaxSequenceIdleMicroseconds: 10_000_000,
		StrategyChoice: &inference.ModelSequenceBatching_Oldest{Oldest: &inference.ModelSequenceBatching_StrategyOldest{
			MaxCandidateSequences: 1024, MaxQueueDelayMicroseconds: 10_000,
		}},
		ControlInput: []*inference.ModelSequenceBatching_ControlInput{
			int32Control("START", inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START),
			int32Control("END", inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END),
			int32Control("READY", inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY),
			{Name: "CORRID", Control: []*inference.ModelSequenceBatching_Control{{
				Kind: inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID, DataType: inference.DataType_TYPE_UINT64,
			}}},
		},
	}}
	cfg.InstanceGroup[0].Count = 2
	cfg.Parameters = map[string]*inference.ModelParameter{"execute_delay_ms": {StringValue: "3"}}
	return &dynaSequence{cfg: cfg}
}

func (m *dynaSequence) Config() *inference.ModelConfig { return m.cfg }

func (m *dynaSequence) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("INPUT")
	var corrID int64
	if t := req.Input("CORRID"); t != nil {
		corrID = int64(tensor.View[uint64](t.Data)[0])
	}
	out := sequenceOutput(tensor.View[int32](in.Data), flag(req, "START"), flag(req, "END"), corrID, flag(req, "READY"))
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "OUTPUT", Datatype: inference.DataType_TYPE_INT32, Shape: in.Shape, Data: tensor.Bytes(out)},
	}})
}

// flag reads an INT32 control input, 0 when the request has no such input.
func flag(req *engines.Request, name string) int64 {
	t := req.Input(name)
	if t == nil {
		return 0
	}
	return int64(tensor.View[int32](t.Data)[0])
}

// int32Control is a sequence control input carried as INT32 0/1, as Triton's examples declare them.
func int32Control(name string, kind inference.ModelSequenceBatching_Control_Kind) *inference.ModelSequenceBatching_ControlInput {
	return &inference.ModelSequenceBatching_ControlInput{
		Name:    name,
		Control: []*inference.ModelSequenceBatching_Control{{Kind: kind, Int32FalseTrue: []int32{0, 1}}},
	}
}
