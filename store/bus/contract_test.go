package bus_test

import (
	"testing"

	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
)

// TestContract runs bustest's suite on GoChannel buses and on Kafka buses over kfake, a broker
// of their own for each case.
func TestContract(t *testing.T) {
	t.Parallel()
	t.Run("gochannel", func(t *testing.T) {
		t.Parallel()
		// GoChannel hands each message over from a goroutine of its own (no order), keeps what
		// was published before a topic's first group for that group only, and keeps no position.
		bustest.Run(t, bustest.Features{}, func(t *testing.T) bus.Bus {
			return bus.NewGoChannel(bustest.Logger(t))
		})
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		features := bustest.Features{Persistent: true, OrderedPerKey: true, UnorderedWindow: true, CommitsAckedPrefix: true}
		bustest.Run(t, features, func(t *testing.T) bus.Bus {
			return newKafka(t, bustest.StartKafka(t))
		})
	})
}
