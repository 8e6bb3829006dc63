package bus_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

func subscribeUnordered(t testing.TB, ctx context.Context, e *env, topic, group string, window int) <-chan *message.Message {
	t.Helper()
	ch, err := e.SubscribeUnordered(ctx, topic, group, window)
	if err != nil {
		t.Fatalf("SubscribeUnordered(%s, %s): %v", topic, group, err)
	}
	return ch
}

// A message held unacked does not hold back the next one of its key (its partition, on Kafka);
// each is delivered once when acked, and a nacked one comes again.
func TestBusUnorderedHoldsNothingBack(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		ch := subscribeUnordered(t, t.Context(), e, "unordered", "g", 4)
		for i := range 3 {
			publish(t, e, "unordered", newMsg(i, "k"))
		}
		var held []*message.Message
		seen := map[int]bool{}
		for range 3 {
			m := receive(t, ch) // none acked yet
			seen[num(t, m)] = true
			held = append(held, m)
		}
		if len(seen) != 3 {
			t.Fatalf("got messages %v, want 0, 1 and 2", seen)
		}
		held[1].Nack()
		again := receive(t, ch)
		if again.UUID != held[1].UUID {
			t.Fatalf("after a nack got %d, want %d again", num(t, again), num(t, held[1]))
		}
		again.Ack()
		held[0].Ack()
		held[2].Ack()
		expectNothing(t, ch)
	})
}

// On Kafka a partition has at most window messages in hand, counted until its position passes
// them: an acked message behind one still held keeps its room.
func TestKafkaBusUnorderedWindow(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		if !e.isKafka() {
			t.Skip("GoChannel hands over whatever is published")
		}
		ch := subscribeUnordered(t, t.Context(), e, "window", "g", 2)
		for i := range 4 {
			publish(t, e, "window", newMsg(i, "k"))
		}
		first, second := receive(t, ch), receive(t, ch) // handed over in no particular order
		if num(t, first) > num(t, second) {
			first, second = second, first
		}
		expectNothing(t, ch)
		second.Ack()
		expectNothing(t, ch) // the position is still at the first
		first.Ack()
		third, fourth := receive(t, ch), receive(t, ch)
		if num(t, third)+num(t, fourth) != 2+3 {
			t.Fatalf("got %d and %d, want 2 and 3", num(t, third), num(t, fourth))
		}
		third.Ack()
		fourth.Ack()
		expectNothing(t, ch)
	})
}

// On Kafka the group's position passes only messages acked with every one before them: after a
// subscription ends with the second of four unacked, the next gets the second, third and fourth
// again (at least once), never the first.
func TestKafkaBusUnorderedCommitsAckedPrefix(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		if !e.isKafka() {
			t.Skip("GoChannel keeps no position")
		}
		const topic, group = "prefix", "g"
		for i := range 4 {
			publish(t, e, topic, newMsg(i, "k"))
		}
		ctx, cancel := context.WithCancel(t.Context())
		first := subscribeUnordered(t, ctx, e, topic, group, 3)
		byNum := map[int]*message.Message{}
		for range 3 {
			m := receive(t, first)
			byNum[num(t, m)] = m
		}
		byNum[0].Ack()
		// The fourth comes once the position passed the first, which says the ack was taken in.
		if m := receive(t, first); num(t, m) != 3 {
			t.Fatalf("got %d, want 3", num(t, m))
		}
		byNum[2].Ack()
		cancel()
		expectClosed(t, first)

		second := subscribeUnordered(t, t.Context(), e, topic, group, 4)
		seen := map[int]bool{}
		for len(seen) < 3 {
			m := receive(t, second)
			seen[num(t, m)] = true
			m.Ack()
		}
		if !seen[1] || !seen[2] || !seen[3] {
			t.Fatalf("got %v again, want 1, 2 and 3", seen)
		}
		expectNothing(t, second)
	})
}

// An unordered subscription on Kafka rides out a broker restart: every message comes.
func TestKafkaBusUnorderedSurvivesBrokerRestart(t *testing.T) {
	eachBus(t, func(t *testing.T, e *env) {
		if !e.isKafka() {
			t.Skip("no broker")
		}
		const topic, n = "unordered-restart", 100
		received := make(chan got, 2*n)
		go consume(subscribeUnordered(t, t.Context(), e, topic, "g", 8), 0, received)
		for i := range n / 2 {
			publish(t, e, topic, newMsg(i, "k"+strconv.Itoa(i%4)))
		}
		seen := map[int]bool{}
		timeout := time.After(4 * patience)
		for len(seen) < n {
			select {
			case g := <-received:
				seen[num(t, g.m)] = true
				if len(seen) == n/2 {
					e.kafka.Restart()
					for i := n / 2; i < n; i++ {
						m := newMsg(i, "k"+strconv.Itoa(i%4))
						deadline := time.Now().Add(patience)
						for err := e.Publish(topic, m); err != nil; err = e.Publish(topic, m) {
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
	})
}
