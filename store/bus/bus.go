// Package bus carries batch work between gateway replicas and batch workers on a Watermill
// publisher/subscriber pair: GoChannel in one process (the default), Kafka (watermill-kafka v3)
// with consumer groups across machines. Delivery is at least once: a message comes back until it
// is acked, so consumers store what they do idempotently. Both pass the contract test suite of
// package bustest, which a new bus runs too.
package bus

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// KeyMetadata is the metadata key of a message's partition key: Kafka puts messages with one key
// on one partition, in order.
const KeyMetadata = "partition_key"

// Bus publishes messages to topics and subscribes consumer groups to them.
type Bus interface {
	// Publish sends the messages to topic, returning once the bus holds them (for Kafka: the
	// broker acknowledged them).
	Publish(topic string, msgs ...*message.Message) error
	// Subscribe returns the messages of topic for the consumer group: each message goes to one
	// subscriber of the group, and comes back (to it or another) until it is acked. The channel
	// closes when ctx ends or the bus closes.
	Subscribe(ctx context.Context, topic, group string) (<-chan *message.Message, error)
	// SubscribeUnordered is Subscribe for messages whose order does not matter, so that one the
	// subscriber holds (a retry waiting for its time) does not hold back those behind it: up to
	// window messages of one partition are in hand at once, each acked or nacked on its own.
	// Delivery stays at least once: a partition's position passes a message only once it and
	// every message before it were acked, so a message in hand when the subscription ends comes
	// again, and so may ones after it that were acked.
	SubscribeUnordered(ctx context.Context, topic, group string, window int) (<-chan *message.Message, error)
	// Close stops every subscription and the publisher.
	Close() error
}
