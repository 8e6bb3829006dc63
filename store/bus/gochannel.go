package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
)

// nackResendSleep is how long a nacked message waits before it is delivered again, so that a
// subscriber that nacks whatever it gets does not spin; it is watermill-kafka's default too.
const nackResendSleep = 100 * time.Millisecond

var errClosed = errors.New("bus: closed")

// NewGoChannel returns the in-process bus: a Watermill GoChannel, for a gateway whose batch
// workers run in the same process. Everything it holds is in memory and lost when the
// process exits.
//
// GoChannel itself knows no consumer groups (every subscriber gets every message) and drops a
// message published while a topic has no subscriber. On top of it:
//
//   - Each group has one GoChannel subscription, made by the group's first Subscribe and kept
//     until Close; the group's subscribers share it, so each message goes to one of them, and
//     every group gets every message, as with Kafka.
//   - A message published to a topic that no group has subscribed to yet is kept (by a
//     subscription that the topic's first group takes over), so a worker that subscribes
//     shortly after the first Publish still gets it. A topic nobody ever subscribes to keeps
//     its messages in memory until Close. A group that first subscribes when the topic already
//     has groups gets only the messages published after that, unlike Kafka, where it would
//     start from the oldest.
//   - A message that a subscriber has not acked when its ctx ends is nacked for it, so another
//     (or the next) subscriber of the group gets it; a nacked message comes back after 100 ms.
//
// It differs from Kafka in two more ways: Publish never blocks (a message waits in memory,
// with a goroutine, until a subscriber takes it, so nothing slows a publisher down), and
// GoChannel hands each message over from its own goroutine, so messages come in no particular
// order, and many of one partition key can be in flight at once.
func NewGoChannel(logger *slog.Logger) Bus {
	ctx, cancel := context.WithCancel(context.Background())
	return &goChannel{
		pubsub: gochannel.NewGoChannel(gochannel.Config{}, watermillLogger(logger)),
		ctx:    ctx,
		cancel: cancel,
		topics: map[string]*goChannelTopic{},
	}
}

type goChannel struct {
	pubsub *gochannel.GoChannel
	// ctx is the life of the groups' subscriptions: until Close.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the goroutines that pass messages to subscribers and acks back.
	wg sync.WaitGroup

	mu     sync.Mutex
	closed bool
	topics map[string]*goChannelTopic
}

type goChannelTopic struct {
	groups map[string]<-chan *message.Message
	// unclaimed holds what was published before the topic had a group: its first group takes it.
	unclaimed <-chan *message.Message
}

func (b *goChannel) Publish(topic string, msgs ...*message.Message) error {
	if topic == "" {
		return errors.New("bus: publishing: no topic")
	}
	if err := b.holdUnclaimed(topic); err != nil {
		return err
	}
	if err := b.pubsub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("bus: publishing to %s: %w", topic, err)
	}
	return nil
}

// holdUnclaimed subscribes on behalf of the topic's future first group if it has none yet, so
// that GoChannel does not drop what is published now.
func (b *goChannel) holdUnclaimed(topic string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("bus: publishing to %s: %w", topic, errClosed)
	}
	t := b.topic(topic)
	if len(t.groups) > 0 || t.unclaimed != nil {
		return nil
	}
	ch, err := b.pubsub.Subscribe(b.ctx, topic)
	if err != nil {
		return fmt.Errorf("bus: holding messages of %s: %w", topic, err)
	}
	t.unclaimed = ch
	return nil
}

func (b *goChannel) Subscribe(ctx context.Context, topic, group string) (<-chan *message.Message, error) {
	if topic == "" || group == "" {
		return nil, fmt.Errorf("bus: subscribing to %q as group %q: topic and group are required", topic, group)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("bus: subscribing to %s: %w", topic, errClosed)
	}
	t := b.topic(topic)
	src, ok := t.groups[group]
	if !ok {
		if t.unclaimed != nil {
			src, t.unclaimed = t.unclaimed, nil
		} else {
			var err error
			if src, err = b.pubsub.Subscribe(b.ctx, topic); err != nil {
				return nil, fmt.Errorf("bus: subscribing to %s: %w", topic, err)
			}
		}
		t.groups[group] = src
	}
	out := make(chan *message.Message)
	b.wg.Add(1)
	go b.forward(ctx, src, out)
	return out, nil
}

// SubscribeUnordered implements Bus: GoChannel hands messages over in no order and holds none
// back for another, so it is Subscribe; the subscriber's own bound on what it takes in hand is
// the window.
func (b *goChannel) SubscribeUnordered(ctx context.Context, topic, group string, _ int) (<-chan *message.Message, error) {
	return b.Subscribe(ctx, topic, group)
}

func (b *goChannel) topic(name string) *goChannelTopic {
	t, ok := b.topics[name]
	if !ok {
		t = &goChannelTopic{groups: map[string]<-chan *message.Message{}}
		b.topics[name] = t
	}
	return t
}

// forward passes the group's messages to one subscriber until its ctx ends or the bus closes.
// When ctx ends, the messages the subscriber has not settled are nacked before its channel
// closes, so an ack that comes later does not count, as with Kafka.
func (b *goChannel) forward(ctx context.Context, src <-chan *message.Message, out chan<- *message.Message) {
	defer b.wg.Done()
	defer close(out)
	var held inFlight
	defer held.nackAll(ctx)
	for {
		var msg *message.Message
		select {
		case m, ok := <-src:
			if !ok {
				return
			}
			msg = m
		case <-ctx.Done():
			return
		case <-b.ctx.Done():
			return
		}
		// The subscriber gets a copy whose ack we pass on (see settle), which lets a nack wait
		// and a subscriber's end give its messages back.
		sent := msg.Copy()
		sent.SetContext(msg.Context())
		if ctx.Err() != nil {
			msg.Nack()
			return
		}
		select {
		case out <- sent:
		case <-ctx.Done():
			msg.Nack()
			return
		case <-b.ctx.Done():
			return
		}
		held.add(sent)
		b.wg.Add(1)
		go b.settle(ctx, msg, sent, &held)
	}
}

// settle passes the subscriber's ack or nack of sent on to GoChannel's msg. A nack waits
// nackResendSleep first, unless the subscription has ended.
func (b *goChannel) settle(ctx context.Context, msg, sent *message.Message, held *inFlight) {
	defer b.wg.Done()
	defer held.remove(sent)
	select {
	case <-sent.Acked():
		msg.Ack()
	case <-sent.Nacked():
		t := time.NewTimer(nackResendSleep)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-b.ctx.Done():
			return
		}
		msg.Nack()
	case <-b.ctx.Done():
	}
}

// inFlight is the messages a subscriber has and has not settled.
type inFlight struct {
	mu   sync.Mutex
	msgs map[*message.Message]struct{}
}

func (f *inFlight) add(m *message.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msgs == nil {
		f.msgs = map[*message.Message]struct{}{}
	}
	f.msgs[m] = struct{}{}
}

func (f *inFlight) remove(m *message.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.msgs, m)
}

// nackAll gives back the unsettled messages of a subscription whose ctx ended (not of one
// ended by Close: those are dropped).
func (f *inFlight) nackAll(ctx context.Context) {
	if ctx.Err() == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for m := range f.msgs {
		m.Nack() // settle passes it on, at once since ctx has ended
	}
}

// Close stops every subscription (their channels are closed when Close returns) and drops the
// messages nobody has acked.
func (b *goChannel) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()

	b.cancel()
	err := b.pubsub.Close()
	b.wg.Wait()
	if err != nil {
		return fmt.Errorf("bus: closing GoChannel: %w", err)
	}
	return nil
}
