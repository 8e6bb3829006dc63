// Package bustest is the contract every bus.Bus passes, and a Kafka broker to run buses on in
// tests.
//
// The contract: messages published to a topic reach each consumer group, each message one
// subscriber of the group, until acked (at least once: a nacked message, or one left unacked
// when its subscription ends, comes again); subscriptions end with their context or the bus;
// topics and groups are required; payloads and metadata arrive intact; SubscribeUnordered does
// not let a held message hold back the ones behind it. What only some buses do (a log that later
// groups read from the start, order per key, SubscribeUnordered's window and commits) is
// declared in Features. bus.NewGoChannel and bus.NewKafka run it in their package's tests; a new
// bus runs it from its own:
//
//	func TestContract(t *testing.T) {
//		bustest.Run(t, bustest.Features{Persistent: true}, func(t *testing.T) bus.Bus {
//			return mybus.New(startBroker(t).Addr(), bustest.Logger(t)) // a broker of its own
//		})
//	}
//
// StartKafka starts a Kafka broker for tests: kfake (github.com/twmb/franz-go/pkg/kfake),
// an in-process fake that speaks the real Kafka wire protocol on 127.0.0.1, so bus.NewKafka
// (IBM/sarama) talks to it exactly as it would to a Kafka cluster.
//
// What kfake can simulate, and what this package gives of it:
//
//   - A broker restart that keeps the data: Restart, or Stop then Start. The cluster persists
//     to a temporary directory (kfake.DataDir); Stop closes it gracefully (listeners closed,
//     every client connection dropped, topics, records, committed offsets and group state
//     written out), and Start brings a cluster up from that directory on the same ports, so
//     clients reconnect to the addresses they know. Between Stop and Start the brokers refuse
//     connections. This is the only restart kfake offers in which clients really lose their
//     connections. It is a clean shutdown, not a crash: kfake has no way to lose the writes a
//     crash would.
//   - Other faults, on Cluster(): RemoveNode/AddNode (with several brokers) close and reopen
//     one broker's listener and hand its partitions to the others, but connections already
//     open to it stay open (it just leads nothing), so it is a leader change more than a
//     restart; ShufflePartitionLeaders and MoveTopicPartition force leader elections; Fault
//     and ControlKey answer chosen requests with errors or hold them back.
//
// The cluster has one broker unless WithBrokers says otherwise, does not create topics on its
// own (bus.NewKafka creates them, as a cluster with auto-creation off needs), and is closed
// when the test ends.
package bustest
