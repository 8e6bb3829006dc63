package cpu

import (
	"context"

	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// sequenceModel is Triton's `simple_sequence` and `simple_dyna_sequence`. The registry's sequence
// handling supplies the control inputs; the model computes
// OUTPUT = ((INPUT + START) + END * CORRID) * READY, where simple_sequence has no END or CORRID.
type sequenceModel struct {
	cfg *inference.ModelConfig
}

func sequenceConfig(name string) *inference.ModelConfig {
	cfg := baseConfig(name, 8)
	cfg.Input = []*inference.ModelInput{input("INPUT", inference.DataType_TYPE_INT32, 1)}
	cfg.Output = []*inference.ModelOutput{output("OUTPUT", inference.DataType_TYPE_INT32, 1)}
	return cfg
}

func newSimpleSequence() *sequenceModel {
	cfg := sequenceConfig("simple_sequence")
	cfg.SchedulingChoice = &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{
		StrategyChoice: &inference.ModelSequenceBatching_Direct{Direct: &inference.ModelSequenceBatching_StrategyDirect{}},
		ControlInput: []*inference.ModelSequenceBatching_ControlInput{
			int32Control("START", inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START),
			int32Control("READY", inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY),
		},
	}}
	return &sequenceModel{cfg: cfg}
}

func newSimpleDynaSequence() *sequenceModel {
	cfg := sequenceConfig("simple_dyna_sequence")
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
	return &sequenceModel{cfg: cfg}
}

func (m *sequenceModel) Config() *inference.ModelConfig { return m.cfg }

func (m *sequenceModel) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("INPUT")
	x := tensor.View[int32](in.Data)
	start, end, ready := flag(req, "START"), flag(req, "END"), flag(req, "READY")
	var corrID int64
	if t := req.Input("CORRID"); t != nil {
		corrID = int64(tensor.View[uint64](t.Data)[0])
	}
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32((int64(v) + start + end*corrID) * ready)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "OUTPUT", Datatype: inference.DataType_TYPE_INT32, Shape: in.Shape, Data: tensor.Bytes(out)},
	}})
}

// flag reads an INT32 control input, 0 when the model has no such control.
func flag(req *engines.Request, name string) int64 {
	t := req.Input(name)
	if t == nil {
		return 0
	}
	return int64(tensor.View[int32](t.Data)[0])
}
