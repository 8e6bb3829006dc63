package bus_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/infergate/infergate/adapters/batch/bus"
	"github.com/infergate/infergate/adapters/batch/bus/bustest"
)

// The contract tests run every case on both buses. Waits for something that should happen
// are bounded by patience, so a broken bus fails instead of hanging; checks that something
// does not happen watch for quiet.
const (
	patience = 15 * time.Second
	quiet    = 500 * time.Millisecond
)

// env is a bus under test; kafka is nil on GoChannel.
type env struct {
	bus.Bus
	kafka *bustest.Kafka
}

func (e *env) isKafka() bool { return e.kafka != nil }

// eachBus runs fn on a fresh GoChannel bus and on a fresh Kafka bus over kfake.
func eachBus(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Parallel()
	t.Run("gochannel", func(t *testing.T) {
		t.Parallel()
		b := bus.NewGoChannel(testLogger(t))
		t.Cleanup(func() { closeBus(t, b) })
		fn(t, &env{Bus: b})
	})
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		k := bustest.StartKafka(t)
		fn(t, &env{Bus: newKafka(t, k), kafka: k})
	})
}

func newKafka(t testing.TB, k *bustest.Kafka) bus.Bus {
	t.Helper()
	b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), ClientID: "bus-test"}, testLogger(t))
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

// testLogger shows the buses' warnings and errors in the test's log, and nothing once the
// test is over (sarama's goroutines may still be winding down).
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
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

// expectNothing fails if a message comes within quiet.
func expectNothing(t testing.TB, ch <-chan *message.Message) {
	t.Helper()
	select {
	case m, ok := <-ch:
		if ok {
			t.Fatalf("unexpected message %s (n=%s)", m.UUID, m.Metadata.Get("n"))
		}
	case <-time.After(quiet):
	}
}

// expectClosed fails unless ch closes within patience; messages still in it are not acked.
func expectClosed(t testing.TB, ch <-chan *message.Message) []*message.Message {
	t.Helper()
	var left []*message.Message
	timeout := time.After(patience)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return left
			}
			left = append(left, m)
		case <-timeout:
			t.Fatalf("subscription channel still open after %v", patience)
		}
	}
}

func TestBusDeliversEachMessageOnceWhenAcked(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		ch := subscribe(t, ctx, e, "once", "g")
		const n = 200
		// One Publish of many messages, then one each.
		var batch []*message.Message
		for i := range n / 2 {
			batch = append(batch, newMsg(i, "k"+strconv.Itoa(i%10)))
		}
		publish(t, e, "once", batch...)
		for i := n / 2; i < n; i++ {
			publish(t, e, "once", newMsg(i, ""))
		}
		seen := map[int]bool{}
		for range n {
			m := receive(t, ch)
			i := num(t, m)
			if seen[i] {
				t.Fatalf("message %d delivered twice", i)
			}
			seen[i] = true
			m.Ack()
		}
		expectNothing(t, ch)
	})
}

func TestBusRedeliversNackedMessage(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ch := subscribe(t, t.Context(), e, "nack", "g")
		sent := newMsg(1, "k")
		publish(t, e, "nack", sent)
		first := receive(t, ch)
		first.Nack()
		again := receive(t, ch)
		if again.UUID != sent.UUID || !bytes.Equal(again.Payload, sent.Payload) {
			t.Fatalf("after a nack got %s %q, want %s %q again", again.UUID, again.Payload, sent.UUID, sent.Payload)
		}
		again.Ack()
		expectNothing(t, ch)
	})
}

func TestBusGroupGetsWhatWasPublishedBeforeItSubscribed(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		const n = 20
		for i := range n {
			publish(t, e, "late", newMsg(i, "k"+strconv.Itoa(i%3)))
		}
		receiveAll := func(group string) {
			t.Helper()
			ch := subscribe(t, t.Context(), e, "late", group)
			seen := map[int]bool{}
			for len(seen) < n {
				m := receive(t, ch)
				seen[num(t, m)] = true
				m.Ack()
			}
		}
		receiveAll("first")
		t.Run("second group", func(t *testing.T) {
			if !e.isKafka() {
				t.Skip("GoChannel keeps messages published before a topic's first group for that group only; a later group starts with what is published after it subscribed")
			}
			receiveAll("second")
		})
	})
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

func TestBusGroupSplitsMessagesBetweenSubscribers(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ctx := t.Context()
		const topic = "split"
		received := make(chan got, 1024)
		for sub := range 2 {
			go consume(subscribe(t, ctx, e, topic, "workers"), sub, received)
		}
		other := make(chan got, 1024)
		go consume(subscribe(t, ctx, e, topic, "collectors"), 0, other)

		// Until both subscribers have a message, the group may still be rebalancing (on Kafka
		// the second member's join makes the first give its partitions back), and a message
		// acked during a rebalance may come again. Probes, with a key each, wait that out.
		probed := map[int]bool{}
		deadline := time.After(patience)
		for round := 0; len(probed) < 2; round++ {
			for i := range 16 {
				m := newMsg(-1, fmt.Sprintf("probe-%d-%d", round, i))
				m.Metadata.Set("probe", "1")
				publish(t, e, topic, m)
			}
			tick := time.After(200 * time.Millisecond)
		wait:
			for {
				select {
				case g := <-received:
					probed[g.sub] = true
				case <-tick:
					break wait
				case <-deadline:
					t.Fatalf("only subscribers %v of the group got a probe in %v", slices.Collect(maps.Keys(probed)), patience)
				}
			}
		}

		const n = 200
		for i := range n {
			publish(t, e, topic, newMsg(i, "key-"+strconv.Itoa(i)))
		}
		bySub := map[int]int{}
		seen := map[int]int{}
		timeout := time.After(patience)
		for len(seen) < n {
			select {
			case g := <-received:
				if g.m.Metadata.Get("probe") != "" {
					continue
				}
				i := num(t, g.m)
				if prev, dup := seen[i]; dup {
					t.Fatalf("message %d delivered to subscriber %d and again to %d", i, prev, g.sub)
				}
				seen[i] = g.sub
				bySub[g.sub]++
			case <-timeout:
				t.Fatalf("the group got %d of %d messages in %v", len(seen), n, patience)
			}
		}
		if bySub[0] == 0 || bySub[1] == 0 {
			t.Fatalf("one subscriber got everything: %v", bySub)
		}
		t.Logf("split between the group's subscribers: %v", bySub)
		// Nothing comes twice once everything is acked.
		select {
		case g := <-received:
			if g.m.Metadata.Get("probe") == "" {
				t.Fatalf("message %d delivered again after it was acked", num(t, g.m))
			}
		case <-time.After(quiet):
		}

		// Another group gets every message too.
		otherSeen := map[int]bool{}
		for len(otherSeen) < n {
			select {
			case g := <-other:
				if g.m.Metadata.Get("probe") == "" {
					otherSeen[num(t, g.m)] = true
				}
			case <-timeout:
				t.Fatalf("the other group got %d of %d messages", len(otherSeen), n)
			}
		}
	})
}

func TestBusRedeliversWhatAClosedSubscriberDidNotAck(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		const topic, group, n = "resume", "g", 20
		ctx, cancel := context.WithCancel(t.Context())
		first := subscribe(t, ctx, e, topic, group)
		// One key, so that on Kafka receiving a message shows the previous ack was taken in:
		// an ack racing with the end of its subscription may be lost (and the message come
		// again), which this test is not about.
		for i := range n {
			publish(t, e, topic, newMsg(i, "k"))
		}
		acked := map[int]bool{}
		for range 4 {
			m := receive(t, first)
			acked[num(t, m)] = true
			m.Ack()
		}
		held := receive(t, first) // never acked
		cancel()
		expectClosed(t, first)
		held.Ack() // too late: it must come back all the same

		second := subscribe(t, t.Context(), e, topic, group)
		seen := map[int]bool{}
		for len(seen) < n-len(acked) {
			m := receive(t, second)
			i := num(t, m)
			if acked[i] {
				t.Fatalf("message %d was acked, yet delivered again to the group's next subscriber", i)
			}
			seen[i] = true
			m.Ack()
		}
		if !seen[num(t, held)] {
			t.Fatalf("the unacked message %d did not come back", num(t, held))
		}
		expectNothing(t, second)
	})
}

func TestBusKeepsPublishOrderPerKey(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		if !e.isKafka() {
			t.Skip("GoChannel hands each message over from a goroutine of its own: it keeps no order, and a key can have many messages in flight at once")
		}
		const topic, perKey = "order", 30
		keys := []string{"a", "b", "c"}
		ch := subscribe(t, t.Context(), e, topic, "g")
		var batch []*message.Message
		for i := range perKey {
			for _, k := range keys {
				m := newMsg(i, k)
				if i < perKey/2 {
					publish(t, e, topic, m)
				} else {
					batch = append(batch, m)
				}
			}
		}
		publish(t, e, topic, batch...)

		// A key's next message waits for the previous one's ack.
		m := receive(t, ch)
		k := m.Metadata.Get(bus.KeyMetadata)
		var others []*message.Message
		hold := time.After(quiet)
	holding:
		for {
			select {
			case o := <-ch:
				if o.Metadata.Get(bus.KeyMetadata) == k {
					t.Fatalf("message %d of key %s came before message %d was acked", num(t, o), k, num(t, m))
				}
				others = append(others, o)
			case <-hold:
				break holding
			}
		}

		next := map[string]int{}
		check := func(m *message.Message) {
			k, i := m.Metadata.Get(bus.KeyMetadata), num(t, m)
			if i != next[k] {
				t.Fatalf("key %s: got message %d, want %d", k, i, next[k])
			}
			next[k]++
			m.Ack()
		}
		check(m)
		for _, o := range others {
			check(o)
		}
		for next["a"]+next["b"]+next["c"] < perKey*len(keys) {
			check(receive(t, ch))
		}
		expectNothing(t, ch)
	})
}

func TestBusSubscriptionEnds(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithCancel(t.Context())
		cancelled := subscribe(t, ctx, e, "ends", "cancelled")
		open := subscribe(t, t.Context(), e, "ends", "open")
		publish(t, e, "ends", newMsg(1, ""))
		receive(t, open).Ack()

		cancel()
		expectClosed(t, cancelled)

		closeBus(t, e)
		expectClosed(t, open)
		if err := e.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := e.Publish("ends", newMsg(2, "")); err == nil {
			t.Fatal("Publish after Close succeeded")
		}
		if _, err := e.Subscribe(t.Context(), "ends", "late"); err == nil {
			t.Fatal("Subscribe after Close succeeded")
		}
	})
}

func TestBusRejectsMissingTopicOrGroup(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		if err := e.Publish("", newMsg(1, "")); err == nil {
			t.Error("Publish with no topic succeeded")
		}
		if _, err := e.Subscribe(t.Context(), "t", ""); err == nil {
			t.Error("Subscribe with no group succeeded")
		}
		if _, err := e.Subscribe(t.Context(), "", "g"); err == nil {
			t.Error("Subscribe with no topic succeeded")
		}
	})
}

func TestBusRoundTripsMetadataAndPayload(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ch := subscribe(t, t.Context(), e, "roundtrip", "g")
		payload := make([]byte, 13<<10)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		sent := message.NewMessage(watermill.NewUUID(), payload)
		sent.Metadata = message.Metadata{
			bus.KeyMetadata: "batch_123",
			"content-type":  "application/json",
			"with space":    "a value, with: punctuation ✓",
			"empty":         "",
		}
		keyless := message.NewMessage(watermill.NewUUID(), []byte{})
		keyless.Metadata.Set("k", "v")
		publish(t, e, "roundtrip", sent, keyless)

		for range 2 {
			m := receive(t, ch)
			want := sent
			if m.UUID == keyless.UUID {
				want = keyless
			} else if m.UUID != sent.UUID {
				t.Fatalf("got UUID %q, want %q or %q", m.UUID, sent.UUID, keyless.UUID)
			}
			if !bytes.Equal(m.Payload, want.Payload) {
				t.Errorf("message %s: payload differs (%d bytes, want %d)", m.UUID, len(m.Payload), len(want.Payload))
			}
			if !maps.Equal(m.Metadata, want.Metadata) {
				t.Errorf("message %s: metadata %v, want %v", m.UUID, m.Metadata, want.Metadata)
			}
			m.Ack()
		}
	})
}

// TestKafkaBusSurvivesBrokerRestart restarts the brokers while messages are being published
// and consumed, at once and after a while down: every message published gets delivered. Some may
// come twice (acks the broker had not committed yet), which consumers absorb by being
// idempotent.
func TestKafkaBusSurvivesBrokerRestart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		brokers int
		down    time.Duration
	}{{1, 0}, {3, 2 * time.Second}} {
		down := c.down
		t.Run(fmt.Sprintf("%d brokers down %v", c.brokers, down), func(t *testing.T) {
			t.Parallel()
			k := bustest.StartKafka(t, bustest.WithBrokers(c.brokers))
			b := newKafka(t, k)
			const topic, n = "restart", 300
			received := make(chan got, n*2)
			go consume(subscribe(t, t.Context(), b, topic, "g"), 0, received)

			var published, retries atomic.Int64
			publishErrs := make(chan error, 1)
			go func() {
				defer close(publishErrs)
				for i := range n {
					m := newMsg(i, "k"+strconv.Itoa(i%8))
					// The caller's part of at-least-once: a Publish that fails is tried again.
					deadline := time.Now().Add(patience)
					for err := b.Publish(topic, m); err != nil; err = b.Publish(topic, m) {
						if time.Now().After(deadline) {
							publishErrs <- fmt.Errorf("publishing %d: %w", i, err)
							return
						}
						retries.Add(1)
						time.Sleep(100 * time.Millisecond)
					}
					published.Add(1)
					time.Sleep(time.Millisecond) // spread the publishing around the restart
				}
			}()

			seen := map[int]int{}
			restarted := false
			timeout := time.After(2 * patience)
			for len(seen) < n {
				select {
				case g := <-received:
					seen[num(t, g.m)]++
					if !restarted && len(seen) == n/3 {
						restarted = true
						t.Logf("stopping the broker with %d messages published, %d received", published.Load(), len(seen))
						k.Stop()
						time.Sleep(down)
						k.Start()
					}
				case err, ok := <-publishErrs:
					if ok {
						t.Fatal(err)
					}
					publishErrs = nil
				case <-timeout:
					t.Fatalf("got %d of %d messages after the restart", len(seen), n)
				}
			}
			dups := 0
			for _, c := range seen {
				dups += c - 1
			}
			t.Logf("all %d messages delivered; %d deliveries were repeats; %d publish calls failed and were retried", n, dups, retries.Load())
		})
	}
}

// TestKafkaBusPartitions checks the topics the Kafka bus creates and where its messages go: a
// key picks one partition, and messages without one are spread over them all.
func TestKafkaBusPartitions(t *testing.T) {
	t.Parallel()
	k := bustest.StartKafka(t)
	b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 5}, testLogger(t))
	if err != nil {
		t.Fatalf("NewKafka: %v", err)
	}
	t.Cleanup(func() { closeBus(t, b) })
	const n = 100
	for i := range n {
		publish(t, b, "keyed", newMsg(i, "one key"))
		publish(t, b, "keyless", newMsg(i, ""))
	}

	client, err := sarama.NewClient(k.Addrs(), sarama.NewConfig())
	if err != nil {
		t.Fatalf("sarama client: %v", err)
	}
	defer client.Close()
	counts := func(topic string) []int64 {
		t.Helper()
		parts, err := client.Partitions(topic)
		if err != nil {
			t.Fatalf("partitions of %s: %v", topic, err)
		}
		var c []int64
		for _, p := range parts {
			off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				t.Fatalf("offset of %s/%d: %v", topic, p, err)
			}
			c = append(c, off)
		}
		return c
	}
	keyed, keyless := counts("keyed"), counts("keyless")
	if len(keyed) != 5 || len(keyless) != 5 {
		t.Fatalf("topics have %d and %d partitions, want 5", len(keyed), len(keyless))
	}
	publish(t, newKafka(t, k), "default", newMsg(0, ""))
	if c := counts("default"); len(c) != 16 {
		t.Errorf("a topic made with the default config has %d partitions, want 16", len(c))
	}
	if !slices.Contains(keyed, n) {
		t.Errorf("messages with one key spread over partitions: %v", keyed)
	}
	if slices.Contains(keyless, 0) {
		t.Errorf("messages without a key left a partition empty: %v", keyless)
	}
	t.Logf("messages per partition: one key %v, no key %v", keyed, keyless)
}

// TestKafkaBusUsesTopicsItMayNotCreate runs the bus on a cluster that refuses to create topics,
// as one with ACLs would: a topic made beforehand works, a missing one is an error.
func TestKafkaBusUsesTopicsItMayNotCreate(t *testing.T) {
	t.Parallel()
	k := bustest.StartKafka(t)
	publish(t, newKafka(t, k), "made-beforehand", newMsg(0, ""))
	k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Err: kerr.TopicAuthorizationFailed, Count: -1})

	b := newKafka(t, k)
	ch := subscribe(t, t.Context(), b, "made-beforehand", "g")
	publish(t, b, "made-beforehand", newMsg(1, ""))
	for range 2 {
		receive(t, ch).Ack()
	}
	err := b.Publish("missing", newMsg(2, ""))
	if err == nil || !strings.Contains(err.Error(), "creating topic missing") {
		t.Fatalf("publishing to a topic that could not be created: %v, want an error about creating it", err)
	}
}

func TestKafkaBusNeedsABroker(t *testing.T) {
	t.Parallel()
	if _, err := bus.NewKafka(bus.KafkaConfig{}, testLogger(t)); err == nil {
		t.Error("NewKafka with no brokers succeeded")
	}
	if testing.Short() {
		t.Skip("an unreachable broker takes sarama's retries, about 6 s, to give up on")
	}
	// A port just closed: nothing listens there.
	k := bustest.StartKafka(t)
	addrs := k.Addrs()
	k.Stop()
	if b, err := bus.NewKafka(bus.KafkaConfig{Brokers: addrs}, testLogger(t)); err == nil {
		closeBus(t, b)
		t.Error("NewKafka with no broker answering succeeded")
	}
}
