package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
)

// The Kafka bus's own tests and the benchmarks' helpers (bustest has its own, for the contract).

// patience bounds every wait for something that should happen, so a broken bus fails instead
// of hanging.
const patience = 15 * time.Second

func newKafka(t testing.TB, k *bustest.Kafka) bus.Bus {
	t.Helper()
	b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), ClientID: "bus-test"}, bustest.Logger(t))
	if err != nil {
		t.Fatalf("NewKafka: %v", err)
	}
	t.Cleanup(func() { closeBus(t, b) })
	return b
}

func closeBus(t testing.TB, b bus.Bus) {
	done := make(chan error, 1)
	go func() { done <- b.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(patience):
		t.Errorf("Close did not return in %v", patience)
	}
}

// newMsg returns message n; key "" leaves it without a partition key.
func newMsg(n int, key string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte("payload "+strconv.Itoa(n)))
	m.Metadata.Set("n", strconv.Itoa(n))
	if key != "" {
		m.Metadata.Set(bus.KeyMetadata, key)
	}
	return m
}

func num(t testing.TB, m *message.Message) int {
	t.Helper()
	n, err := strconv.Atoi(m.Metadata.Get("n"))
	if err != nil {
		t.Fatalf("message %s has no number: %q", m.UUID, m.Metadata.Get("n"))
	}
	return n
}

func publish(t testing.TB, b bus.Bus, topic string, msgs ...*message.Message) {
	t.Helper()
	if err := b.Publish(topic, msgs...); err != nil {
		t.Fatalf("Publish to %s: %v", topic, err)
	}
}

func subscribe(t testing.TB, ctx context.Context, b bus.Bus, topic, group string) <-chan *message.Message {
	t.Helper()
	ch, err := b.Subscribe(ctx, topic, group)
	if err != nil {
		t.Fatalf("Subscribe(%s, %s): %v", topic, group, err)
	}
	return ch
}

func subscribeUnordered(t testing.TB, ctx context.Context, b bus.Bus, topic, group string, window int) <-chan *message.Message {
	t.Helper()
	ch, err := b.SubscribeUnordered(ctx, topic, group, window)
	if err != nil {
		t.Fatalf("SubscribeUnordered(%s, %s): %v", topic, group, err)
	}
	return ch
}

// receive returns the next message, failing if none comes in patience or the channel closes.
func receive(t testing.TB, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("subscription channel closed while a message was expected")
		}
		return m
	case <-time.After(patience):
		t.Fatalf("no message in %v", patience)
	}
	return nil
}

// got is a message received by subscriber sub.
type got struct {
	sub int
	m   *message.Message
}

// consume acks everything ch delivers and reports it as received by sub, until ch closes.
func consume(ch <-chan *message.Message, sub int, out chan<- got) {
	for m := range ch {
		m.Ack()
		out <- got{sub, m}
	}
}
