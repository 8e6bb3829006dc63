package bustest

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is a kfake cluster started by StartKafka. Its methods that change the cluster's state
// fail the test through t.Fatal, so call them from the test's goroutine.
type Kafka struct {
	t     testing.TB
	opts  []kfake.Opt
	ports []int

	mu sync.Mutex
	c  *kfake.Cluster // nil while stopped
}

// Option configures StartKafka.
type Option func(*config)

type config struct {
	brokers int
	kfake   []kfake.Opt
}

// WithBrokers starts n brokers instead of one.
func WithBrokers(n int) Option {
	return func(c *config) { c.brokers = n }
}

// WithKfakeOptions passes options to kfake.NewCluster, after this package's own (so they win),
// every time the cluster starts. Ports and DataDir are this package's to set.
func WithKfakeOptions(opts ...kfake.Opt) Option {
	return func(c *config) { c.kfake = append(c.kfake, opts...) }
}

// StartKafka starts a kfake cluster on 127.0.0.1 and closes it when the test ends.
func StartKafka(t testing.TB, opts ...Option) *Kafka {
	t.Helper()
	cfg := config{brokers: 1}
	for _, o := range opts {
		o(&cfg)
	}
	k := &Kafka{
		t: t,
		// DataDir from the start, so that Stop keeps everything for Start.
		opts: append([]kfake.Opt{kfake.NumBrokers(cfg.brokers), kfake.DataDir(t.TempDir())}, cfg.kfake...),
	}
	c, err := kfake.NewCluster(k.opts...)
	if err != nil {
		t.Fatalf("bustest: starting kfake: %v", err)
	}
	for _, a := range c.ListenAddrs() {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			c.Close()
			t.Fatalf("bustest: kfake address %q: %v", a, err)
		}
		port, _ := strconv.Atoi(p)
		k.ports = append(k.ports, port)
	}
	k.c = c
	t.Cleanup(k.Stop)
	return k
}

// Addrs returns the brokers' host:port, the same across restarts.
func (k *Kafka) Addrs() []string {
	addrs := make([]string, len(k.ports))
	for i, p := range k.ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs
}

// Cluster returns the running kfake cluster, for the faults this package does not wrap; nil
// while stopped. A Start makes a new one.
func (k *Kafka) Cluster() *kfake.Cluster {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c
}

// Stop shuts the cluster down cleanly, keeping its state for Start: clients lose their
// connections and cannot connect until Start. Stopping a stopped cluster does nothing.
func (k *Kafka) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// Start brings a stopped cluster back on its ports with the state Stop saved. Starting a
// running cluster does nothing.
func (k *Kafka) Start() {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		return
	}
	opts := append(append([]kfake.Opt(nil), k.opts...), kfake.Ports(k.ports...))
	// A port can take a moment to be free again; another process taking it meanwhile is a
	// risk of reusing ports at all.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := kfake.NewCluster(opts...)
		if err == nil {
			k.c = c
			return
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			k.t.Fatalf("bustest: restarting kfake on ports %v: %v", k.ports, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Restart stops and starts the cluster: what a broker restart looks like to clients, with
// nothing lost that was acknowledged.
func (k *Kafka) Restart() {
	k.t.Helper()
	k.Stop()
	k.Start()
}
