package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// KafkaConfig configures NewKafka.
type KafkaConfig struct {
	// Brokers are the bootstrap brokers' host:port.
	Brokers []string
	// Partitions is how many partitions a topic the bus creates gets; default 16. It bounds a
	// group's parallelism: a partition's next message is delivered only after the previous one
	// was acked. A topic that already exists is used as it is.
	Partitions int32
	// ClientID names the bus's connections in the brokers' logs and quotas; default "infergate".
	ClientID string
	// NackResendSleep is how long a nacked message waits before it is delivered again (holding
	// up its partition meanwhile); 0 means watermill-kafka's default, 100 ms, and a negative
	// value no wait.
	NackResendSleep time.Duration
}

// topicInitTimeout bounds creating a topic and waiting for its partitions to have leaders.
const topicInitTimeout = 30 * time.Second

// NewKafka returns a bus on Kafka (watermill-kafka v3 on IBM/sarama). It connects to the
// brokers at once and fails if none answers (after sarama's retries, about 6 s).
//
// Publish returns once every in-sync replica has the messages (acks=all), sending them one
// after the other. A message's KeyMetadata picks its partition, so messages with one key keep
// their order; messages without one are spread over the partitions by their UUID. Topics are
// created on first use with cfg.Partitions partitions and the brokers' default replication
// factor, so the brokers need not create topics on their own. A message must fit Kafka's
// message size limit (message.max.bytes, about 1 MB by default).
//
// Subscribe joins the group: one watermill-kafka Subscriber per group, reused, each Subscribe
// a group member of its own, the group's partitions shared among them (a member that joins or
// leaves makes the group rebalance, within a heartbeat, 3 s). A partition's next message is
// delivered only after the previous one was acked, so a key's messages are handled one at a
// time, in order, and a group has at most one message in hand per partition. A group that did
// not exist starts at the topic's oldest message; an existing one where it committed. Acks are
// committed every second and when a subscription ends, so after a crash the last second's
// acked messages come again. Messages in hand when a subscription ends are not committed and
// are delivered again, and so may be one acked just before it ended (watermill-kafka takes an
// ack in asynchronously). Close waits for nacked messages' NackResendSleep.
//
// SubscribeUnordered joins the group through a sarama consumer group of its own per call, and
// hands over up to window messages of a partition at once; the partition's committed position
// moves past a message once it and every message before it were acked.
func NewKafka(cfg KafkaConfig, logger *slog.Logger) (Bus, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("bus: kafka: no brokers")
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 16
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "infergate"
	}
	closing, stopAll := context.WithCancel(context.Background())
	b := &kafkaBus{
		closing:   closing,
		stopAll:   stopAll,
		cfg:       cfg,
		log:       watermillLogger(logger),
		marshaler: kafka.NewWithPartitioningMarshaler(partitionKey),
		subs:      map[string]*kafka.Subscriber{},
		topics:    map[string]bool{},
	}
	var err error
	if b.initializer, err = kafka.NewSubscriber(b.subscriberConfig(""), b.log); err != nil {
		stopAll()
		return nil, fmt.Errorf("bus: kafka: topic initializer: %w", err)
	}
	pcfg := b.saramaConfig(kafka.DefaultSaramaSyncPublisherConfig())
	// A message is enqueued once all in-sync replicas have it, not just the leader.
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	b.pub, err = kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:               cfg.Brokers,
		Marshaler:             b.marshaler,
		OverwriteSaramaConfig: pcfg,
	}, b.log)
	if err != nil {
		_ = b.initializer.Close() // holds no connection yet
		stopAll()
		return nil, fmt.Errorf("bus: kafka: publisher on %v: %w", cfg.Brokers, err)
	}
	return b, nil
}

// partitionKey is the Kafka key of msg: its KeyMetadata, or else its UUID, because sarama
// sends every message with an empty key to one partition.
func partitionKey(_ string, msg *message.Message) (string, error) {
	if k := msg.Metadata.Get(KeyMetadata); k != "" {
		return k, nil
	}
	return msg.UUID, nil
}

type kafkaBus struct {
	cfg       KafkaConfig
	log       watermill.LoggerAdapter
	marshaler kafka.MarshalerUnmarshaler
	// initializer only creates topics (watermill-kafka's SubscribeInitialize); it never consumes.
	initializer *kafka.Subscriber

	// pubMu lets Close wait for the Publish calls in progress: watermill's Publisher is not
	// safe to close while one runs.
	pubMu sync.RWMutex
	pub   *kafka.Publisher

	mu     sync.Mutex
	closed bool
	subs   map[string]*kafka.Subscriber // by group

	// closing ends with Close: the unordered subscriptions (SubscribeUnordered) stop, and
	// unordered counts them until their channels are closed.
	closing   context.Context
	stopAll   context.CancelFunc
	unordered sync.WaitGroup

	topicsMu sync.Mutex
	topics   map[string]bool // created, or found to exist
}

func (b *kafkaBus) saramaConfig(c *sarama.Config) *sarama.Config {
	c.ClientID = b.cfg.ClientID
	// 2.4 is the first protocol version whose CreateTopics lets the brokers pick the
	// replication factor (default.replication.factor, KIP-464); sarama's default is 2.1.
	c.Version = sarama.V2_4_0_0
	// The bus creates its topics with the partitions it wants (ensureTopic); a metadata
	// request must not create one with the brokers' defaults instead.
	c.Metadata.AllowAutoTopicCreation = false
	return c
}

func (b *kafkaBus) subscriberConfig(group string) kafka.SubscriberConfig {
	scfg := b.saramaConfig(kafka.DefaultSaramaSubscriberConfig())
	// A group that starts after messages were published gets them: Kafka's default is to
	// start at the newest.
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return kafka.SubscriberConfig{
		Brokers:               b.cfg.Brokers,
		Unmarshaler:           b.marshaler,
		OverwriteSaramaConfig: scfg,
		ConsumerGroup:         group,
		NackResendSleep:       b.cfg.NackResendSleep,
		InitializeTopicDetails: &sarama.TopicDetail{
			NumPartitions:     b.cfg.Partitions,
			ReplicationFactor: -1, // the brokers' default.replication.factor
		},
	}
}

func (b *kafkaBus) Publish(topic string, msgs ...*message.Message) error {
	if topic == "" {
		return errors.New("bus: publishing: no topic")
	}
	b.pubMu.RLock()
	defer b.pubMu.RUnlock()
	if b.pub == nil {
		return fmt.Errorf("bus: publishing to %s: %w", topic, errClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), topicInitTimeout)
	defer cancel()
	if err := b.ensureTopic(ctx, topic); err != nil {
		return err
	}
	if err := b.pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("bus: publishing to %s: %w", topic, err)
	}
	return nil
}

func (b *kafkaBus) Subscribe(ctx context.Context, topic, group string) (<-chan *message.Message, error) {
	if topic == "" || group == "" {
		return nil, fmt.Errorf("bus: subscribing to %q as group %q: topic and group are required", topic, group)
	}
	if b.isClosed() {
		return nil, fmt.Errorf("bus: subscribing to %s: %w", topic, errClosed)
	}
	if err := b.ensureTopic(ctx, topic); err != nil {
		return nil, err
	}
	sub, err := b.subscriber(group)
	if err != nil {
		return nil, err
	}
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("bus: subscribing to %s as group %s: %w", topic, group, err)
	}
	return ch, nil
}

func (b *kafkaBus) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// subscriber returns the group's Subscriber, made on first use.
func (b *kafkaBus) subscriber(group string) (*kafka.Subscriber, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("bus: subscribing as group %s: %w", group, errClosed)
	}
	if s, ok := b.subs[group]; ok {
		return s, nil
	}
	s, err := kafka.NewSubscriber(b.subscriberConfig(group), b.log)
	if err != nil {
		return nil, fmt.Errorf("bus: subscriber for group %s: %w", group, err)
	}
	b.subs[group] = s
	return s, nil
}

// ensureTopic creates topic once per bus; creating one that exists is not an error. Topics
// are created here rather than by the brokers on first use because auto-created topics get
// the brokers' num.partitions (1 by default), and many clusters disable auto-creation. Where
// clients may not create topics (ACLs), an operator makes them beforehand: a topic that
// cannot be created but exists is used as it is.
func (b *kafkaBus) ensureTopic(ctx context.Context, topic string) error {
	b.topicsMu.Lock()
	defer b.topicsMu.Unlock()
	if b.topics[topic] {
		return nil
	}
	if err := b.initializer.SubscribeInitializeWithContext(ctx, topic); err != nil {
		if _, lerr := b.initializer.PartitionOffset(topic); lerr != nil {
			return fmt.Errorf("bus: creating topic %s with %d partitions: %w", topic, b.cfg.Partitions, err)
		}
		b.log.Debug("Using a topic the bus could not create", watermill.LogFields{"topic": topic, "err": err.Error()})
	}
	b.topics[topic] = true
	return nil
}

// Close ends every subscription, waiting for their channels to close, and closes the
// publisher after the Publish calls in progress. Closing twice is a no-op.
func (b *kafkaBus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	b.stopAll()
	b.unordered.Wait()

	var errs []error
	for group, s := range subs {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("bus: closing the subscriber of group %s: %w", group, err))
		}
	}
	if err := b.initializer.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bus: closing the topic initializer: %w", err))
	}
	b.pubMu.Lock()
	pub := b.pub
	b.pub = nil
	b.pubMu.Unlock()
	if err := pub.Close(); err != nil {
		errs = append(errs, fmt.Errorf("bus: closing the publisher: %w", err))
	}
	return errors.Join(errs...)
}
