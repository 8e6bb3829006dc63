// Package bus carries batch work between gateway replicas and batch workers on a Watermill
// publisher/subscriber pair: GoChannel in one process (the default), Kafka (watermill-kafka v3)
// with consumer groups across machines. Delivery is at least once: a message comes back until it
// is acked, so consumers store what they do idempotently.
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
	// Close stops every subscription and the publisher.
	Close() error
}
