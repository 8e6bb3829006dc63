package bus_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
)

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
	b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 5}, bustest.Logger(t))
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
	if _, err := bus.NewKafka(bus.KafkaConfig{}, bustest.Logger(t)); err == nil {
		t.Error("NewKafka with no brokers succeeded")
	}
	if testing.Short() {
		t.Skip("an unreachable broker takes sarama's retries, about 6 s, to give up on")
	}
	// A port just closed: nothing listens there.
	k := bustest.StartKafka(t)
	addrs := k.Addrs()
	k.Stop()
	if b, err := bus.NewKafka(bus.KafkaConfig{Brokers: addrs}, bustest.Logger(t)); err == nil {
		closeBus(t, b)
		t.Error("NewKafka with no broker answering succeeded")
	}
}

// An unordered subscription on Kafka rides out a broker restart: every message comes.
func TestKafkaBusUnorderedSurvivesBrokerRestart(t *testing.T) {
	t.Parallel()
	k := bustest.StartKafka(t)
	b := newKafka(t, k)
	const topic, n = "unordered-restart", 100
	received := make(chan got, 2*n)
	go consume(subscribeUnordered(t, t.Context(), b, topic, "g", 8), 0, received)
	for i := range n / 2 {
		publish(t, b, topic, newMsg(i, "k"+strconv.Itoa(i%4)))
	}
	seen := map[int]bool{}
	timeout := time.After(4 * patience)
	for len(seen) < n {
		select {
		case g := <-received:
			seen[num(t, g.m)] = true
			if len(seen) == n/2 {
				k.Restart()
				for i := n / 2; i < n; i++ {
					m := newMsg(i, "k"+strconv.Itoa(i%4))
					deadline := time.Now().Add(patience)
					for err := b.Publish(topic, m); err != nil; err = b.Publish(topic, m) {
						if time.Now().After(deadline) {
							t.Fatalf("publishing %d after the restart: %v", i, err)
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
		case <-timeout:
			t.Fatalf("got %d of %d messages", len(seen), n)
		}
	}
}
