package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// SubscribeUnordered implements Bus. watermill-kafka hands a partition's next message over only
// once the previous one was acked, so this consumes with a sarama consumer group of its own:
// each subscription is a group member, and each partition it is given may have up to window
// messages in hand. A message counts against the window from when it is read until the
// partition's committed position passes it, so a message held for long holds back at most
// window-1 others of its partition, and what the subscription keeps stays bounded.
func (b *kafkaBus) SubscribeUnordered(ctx context.Context, topic, group string, window int) (<-chan *message.Message, error) {
	if topic == "" || group == "" {
		return nil, fmt.Errorf("bus: subscribing to %q as group %q: topic and group are required", topic, group)
	}
	window = max(window, 1)
	if b.isClosed() {
		return nil, fmt.Errorf("bus: subscribing to %s: %w", topic, errClosed)
	}
	if err := b.ensureTopic(ctx, topic); err != nil {
		return nil, err
	}
	cg, err := sarama.NewConsumerGroup(b.cfg.Brokers, group, b.subscriberConfig(group).OverwriteSaramaConfig)
	if err != nil {
		return nil, fmt.Errorf("bus: consumer of group %s: %w", group, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = cg.Close()
		return nil, fmt.Errorf("bus: subscribing to %s: %w", topic, errClosed)
	}
	b.unordered.Add(1)
	b.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.closing, cancel)
	out := make(chan *message.Message)
	h := &unorderedHandler{out: out, window: window, unmarshaler: b.marshaler, nackSleep: b.cfg.NackResendSleep}
	if h.nackSleep == 0 {
		h.nackSleep = nackResendSleep
	}
	fields := watermill.LogFields{"topic": topic, "consumer_group": group}
	go func() {
		defer b.unordered.Done()
		defer close(out)
		defer h.delivering.Wait() // every session ended: each delivery returns
		defer stop()
		defer cancel()
		errsDone := make(chan struct{})
		go func() {
			defer close(errsDone)
			for err := range cg.Errors() {
				b.log.Info("Kafka consumer error; the group retries", fields.Add(watermill.LogFields{"err": err.Error()}))
			}
		}()
		for ctx.Err() == nil {
			// Consume returns at each rebalance, and when a session cannot be set up (the
			// brokers are down): the loop joins the group again.
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				if errors.Is(err, sarama.ErrClosedConsumerGroup) {
					break
				}
				if ctx.Err() == nil {
					b.log.Info("Kafka consumer group session failed; joining again", fields.Add(watermill.LogFields{"err": err.Error()}))
					select {
					case <-time.After(time.Second):
					case <-ctx.Done():
					}
				}
			}
		}
		if err := cg.Close(); err != nil { // commits what was marked
			b.log.Info("Closing a Kafka consumer group", fields.Add(watermill.LogFields{"err": err.Error()}))
		}
		<-errsDone
	}()
	return out, nil
}

// unorderedHandler consumes the partitions a session was given.
type unorderedHandler struct {
	out         chan<- *message.Message
	window      int
	unmarshaler interface {
		Unmarshal(*sarama.ConsumerMessage) (*message.Message, error)
	}
	nackSleep  time.Duration
	delivering sync.WaitGroup
}

func (h *unorderedHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *unorderedHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim reads the partition's messages while its window has room, handing each over
// from a goroutine of its own. It returns as soon as the session ends, without waiting for the
// messages in hand: they are not committed, and come again to the partition's next owner.
func (h *unorderedHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	ctx := sess.Context()
	p := &pending{slots: make(chan struct{}, h.window)}
	for {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		var km *sarama.ConsumerMessage
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			km = m
		case <-ctx.Done():
			return nil
		}
		p.add(km.Offset)
		msg, err := h.unmarshaler.Unmarshal(km)
		if err != nil {
			// Not a message of ours (no consumer could read it, now or later): passed over,
			// or it would hold the partition's position for ever.
			h.settled(sess, km, p)
			continue
		}
		h.delivering.Go(func() { h.deliver(ctx, sess, km, msg, p) })
	}
}

// deliver hands msg over until it is acked (a nack hands it over again after nackSleep) or the
// session ends.
func (h *unorderedHandler) deliver(ctx context.Context, sess sarama.ConsumerGroupSession, km *sarama.ConsumerMessage, msg *message.Message, p *pending) {
	for {
		msg.SetContext(ctx)
		select {
		case h.out <- msg:
		case <-ctx.Done():
			return
		}
		select {
		case <-msg.Acked():
			h.settled(sess, km, p)
			return
		case <-msg.Nacked():
			msg = msg.Copy()
			if h.nackSleep > 0 {
				select {
				case <-time.After(h.nackSleep):
				case <-ctx.Done():
					return
				}
			}
		case <-ctx.Done():
			return // an ack that comes now is not committed: the message comes again
		}
	}
}

// settled marks the partition's position past every message up to the first one still in hand,
// and frees their room in the window.
func (h *unorderedHandler) settled(sess sarama.ConsumerGroupSession, km *sarama.ConsumerMessage, p *pending) {
	next, freed := p.done(km.Offset)
	if freed == 0 {
		return
	}
	// Marks may arrive out of order from two deliveries; sarama keeps the highest.
	sess.MarkOffset(km.Topic, km.Partition, next, "")
	for range freed {
		<-p.slots
	}
}

// pending is the offsets of one partition's messages read and not yet passed by its position,
// in order, and which of them are settled.
type pending struct {
	slots chan struct{} // one per offset in offs

	mu      sync.Mutex
	offs    []int64
	settled map[int64]bool
}

func (p *pending) add(off int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.offs = append(p.offs, off)
}

// done settles off; when that lets the position move, it returns the new position (the offset
// to read next) and how many offsets it passed.
func (p *pending) done(off int64) (next int64, passed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.settled == nil {
		p.settled = map[int64]bool{}
	}
	p.settled[off] = true
	for len(p.offs) > 0 && p.settled[p.offs[0]] {
		delete(p.settled, p.offs[0])
		next = p.offs[0] + 1
		p.offs = p.offs[1:]
		passed++
	}
	return next, passed
}
