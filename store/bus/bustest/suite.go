package bustest

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
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/infergate/infergate/store/bus"
)

// Features declares what a bus offers beyond what every bus.Bus does (at-least-once delivery to
// consumer groups, redelivery of what is nacked or left unacked); a case that needs a feature
// the bus lacks is skipped.
type Features struct {
	// Persistent: a consumer group gets what was published to a topic before it first
	// subscribed, whichever groups subscribed before it (Kafka keeps a log). Without it, only
	// a topic's first group is sure to (GoChannel keeps earlier messages for that group only).
	Persistent bool
	// OrderedPerKey: Subscribe delivers the messages of one partition key (bus.KeyMetadata) in
	// the order they were published, and a key's next message waits for the previous one's ack.
	OrderedPerKey bool
	// UnorderedWindow: SubscribeUnordered has at most window messages of a partition in hand,
	// counted until the group's position passes them, so an acked message behind one still held
	// keeps its room.
	UnorderedWindow bool
	// CommitsAckedPrefix: a group's position on a partition passes only messages acked with
	// every one before them, so after a subscription ends, the next gets again every message
	// from the first unacked one on, acked ones included.
	CommitsAckedPrefix bool
}

// Factory returns a fresh bus, sharing no topic or group with any other: each case publishes to
// and subscribes to topics and groups of its own names ("once", "g", ...). Run closes the bus
// when the case ends (Close must be safe to call more than once); anything else to release is
// released through t.Cleanup. Kafka's, with bustest's broker:
//
//	func(t *testing.T) bus.Bus {
//		k := bustest.StartKafka(t)
//		b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs()}, bustest.Logger(t))
//		if err != nil {
//			t.Fatal(err)
//		}
//		return b
//	}
type Factory func(t *testing.T) bus.Bus

// Run runs every case of the contract against buses from f: one subtest per case, named after
// the behaviour it checks (DeliversEachMessageOnceWhenAcked, RedeliversNackedMessage, ...), each
// on a bus of its own and in parallel with the others (t.Parallel).
func Run(t *testing.T, features Features, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := f(t)
			if b == nil {
				t.Fatal("the factory returned no bus")
			}
			t.Cleanup(func() { closeBus(t, b) })
			c.run(t, b, features)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, b bus.Bus, f Features)
}{
	{"DeliversEachMessageOnceWhenAcked", deliversEachMessageOnceWhenAcked},
	{"RedeliversNackedMessage", redeliversNackedMessage},
	{"GroupGetsWhatWasPublishedBeforeItSubscribed", groupGetsWhatWasPublishedBeforeItSubscribed},
	{"GroupSplitsMessagesBetweenSubscribers", groupSplitsMessagesBetweenSubscribers},
	{"RedeliversWhatAClosedSubscriberDidNotAck", redeliversWhatAClosedSubscriberDidNotAck},
	{"KeepsPublishOrderPerKey", keepsPublishOrderPerKey},
	{"SubscriptionEnds", subscriptionEnds},
	{"RejectsMissingTopicOrGroup", rejectsMissingTopicOrGroup},
	{"RoundTripsMetadataAndPayload", roundTripsMetadataAndPayload},
	{"UnorderedHoldsNothingBack", unorderedHoldsNothingBack},
	{"UnorderedWindow", unorderedWindow},
	{"UnorderedCommitsAckedPrefix", unorderedCommitsAckedPrefix},
}

// Waits for something that should happen are bounded by patience, so a broken bus fails instead
// of hanging; checks that something does not happen watch for quiet.
const (
	patience = 15 * time.Second
	quiet    = 500 * time.Millisecond
)

func deliversEachMessageOnceWhenAcked(t *testing.T, e bus.Bus, _ Features) {
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
}

func redeliversNackedMessage(t *testing.T, e bus.Bus, _ Features) {
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
}

func groupGetsWhatWasPublishedBeforeItSubscribed(t *testing.T, e bus.Bus, f Features) {
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
		if !f.Persistent {
			t.Skip("not Features.Persistent: a group that subscribes later may get only what is published after it subscribed")
		}
		receiveAll("second")
	})
}

func groupSplitsMessagesBetweenSubscribers(t *testing.T, e bus.Bus, _ Features) {
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
}

func redeliversWhatAClosedSubscriberDidNotAck(t *testing.T, e bus.Bus, _ Features) {
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
}

func keepsPublishOrderPerKey(t *testing.T, e bus.Bus, f Features) {
	if !f.OrderedPerKey {
		t.Skip("not Features.OrderedPerKey: the bus keeps no order, and a key can have many messages in flight at once")
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
}

func subscriptionEnds(t *testing.T, e bus.Bus, _ Features) {
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
}

func rejectsMissingTopicOrGroup(t *testing.T, e bus.Bus, _ Features) {
	if err := e.Publish("", newMsg(1, "")); err == nil {
		t.Error("Publish with no topic succeeded")
	}
	if _, err := e.Subscribe(t.Context(), "t", ""); err == nil {
		t.Error("Subscribe with no group succeeded")
	}
	if _, err := e.Subscribe(t.Context(), "", "g"); err == nil {
		t.Error("Subscribe with no topic succeeded")
	}
}

func roundTripsMetadataAndPayload(t *testing.T, e bus.Bus, _ Features) {
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
}

// A message held unacked does not hold back the next one of its key (its partition, on Kafka);
// each is delivered once when acked, and a nacked one comes again.
func unorderedHoldsNothingBack(t *testing.T, e bus.Bus, _ Features) {
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
}

// With Features.UnorderedWindow a partition has at most window messages in hand, counted until
// its position passes them: an acked message behind one still held keeps its room.
func unorderedWindow(t *testing.T, e bus.Bus, f Features) {
	if !f.UnorderedWindow {
		t.Skip("not Features.UnorderedWindow: the bus hands over whatever is published")
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
}

// With Features.CommitsAckedPrefix the group's position passes only messages acked with every
// one before them: after a subscription ends with the second of four unacked, the next gets the
// second, third and fourth again (at least once), never the first.
func unorderedCommitsAckedPrefix(t *testing.T, e bus.Bus, f Features) {
	if !f.CommitsAckedPrefix {
		t.Skip("not Features.CommitsAckedPrefix: the bus keeps no position")
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

// Logger returns a logger for a bus under test: it shows warnings and errors in the test's log,
// and nothing once the test is over (a bus's goroutines, sarama's say, may still be winding
// down).
func Logger(tb testing.TB) *slog.Logger {
	w := &testWriter{t: tb}
	tb.Cleanup(w.stop)
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

func subscribeUnordered(t testing.TB, ctx context.Context, b bus.Bus, topic, group string, window int) <-chan *message.Message {
	t.Helper()
	ch, err := b.SubscribeUnordered(ctx, topic, group, window)
	if err != nil {
		t.Fatalf("SubscribeUnordered(%s, %s): %v", topic, group, err)
	}
	return ch
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
