package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
	"github.com/infergate/infergate/store/slots"
	"github.com/infergate/infergate/surface/batch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// Roles a process plays.
const (
	RoleGateway     = "gateway"      // serves every surface; runs batch lines too unless batch.worker is false
	RoleBatchWorker = "batch-worker" // runs batch lines only: needs batch.kafka and redis to share the work
)

type batchConfig struct {
	// Disabled turns the Files and Batches API off.
	Disabled bool `yaml:"disabled"`
	// Dir holds the files (inputs, outputs, errors); a shared volume when replicas run on several
	// machines. Default: infergate/files in the system's temporary directory.
	Dir string `yaml:"dir"`
	// Worker runs batch lines in the gateway process too; default true. A -role batch-worker
	// process always runs them.
	Worker *bool `yaml:"worker"`
	// Concurrency bounds the batch requests in flight per model: across every gateway and
	// worker sharing redis.addr when there is one, else in this process; default 64.
	Concurrency int `yaml:"concurrency"`
	// ConcurrencyByModel overrides Concurrency for the models named.
	ConcurrencyByModel map[string]int `yaml:"concurrency_by_model"`
	// Attempts bounds the tries of a line failing with a retryable error; default 4.
	Attempts int `yaml:"attempts"`
	// RetryBackoff is the first wait between tries, doubling after each; default 500 ms.
	RetryBackoff time.Duration `yaml:"retry_backoff"`
	// ChunkLines is the number of lines per bus message; default 64.
	ChunkLines int `yaml:"chunk_lines"`
	// MaxLines bounds one batch's requests; default 100000.
	MaxLines int `yaml:"max_lines"`
	// MaxFileBytes bounds an uploaded file; default 200 MiB.
	MaxFileBytes int `yaml:"max_file_bytes"`
	// MaxLineBytes bounds one request line; default 16 MiB, or 900 KB with Kafka (a line travels
	// in one message, and brokers refuse messages over message.max.bytes, 1 MB by default).
	MaxLineBytes int `yaml:"max_line_bytes"`
	// RedispatchAfter publishes again the lines without a result of a batch that made no
	// progress for that long. Default 2m with Redis and no Kafka (the in-process bus loses what it
	// holds when the process ends, the state in Redis does not), else off.
	RedispatchAfter time.Duration `yaml:"redispatch_after"`
	// RedisTimeout bounds the batch state's part of one Files or Batches API request: when
	// Redis is down or does not answer within it, the request answers 503 with Retry-After
	// instead of waiting; default 2s.
	RedisTimeout time.Duration `yaml:"redis_timeout"`
	// Kafka, when brokers are set, carries batch work between replicas and workers; otherwise it
	// stays in this process.
	Kafka kafkaConfig `yaml:"kafka"`
}

type kafkaConfig struct {
	Brokers []string `yaml:"brokers"`
	// TopicPrefix names the topics (<prefix>.requests, .results, .dead-letter); default
	// infergate.batch.
	TopicPrefix string `yaml:"topic_prefix"`
	// Partitions of topics infergate creates; default 16.
	Partitions int `yaml:"partitions"`
}

func (c *batchConfig) worker() bool { return c.Worker == nil || *c.Worker }

// limits are the batch slots per model.
func (c *batchConfig) limits() slots.Limits {
	l := slots.Limits{Default: c.Concurrency, ByKey: c.ConcurrencyByModel}
	if l.Default == 0 {
		l.Default = 64
	}
	return l
}

// validate checks the batch section for the role.
func (c *batchConfig) validate(role string, redisAddr string) []string {
	var lines []string
	if role == RoleBatchWorker {
		if c.Disabled {
			lines = append(lines, "-role batch-worker: batch.disabled is set")
		}
		if len(c.Kafka.Brokers) == 0 || redisAddr == "" {
			lines = append(lines, "-role batch-worker needs batch.kafka.brokers and redis.addr, shared with the gateways")
		}
	}
	if len(c.Kafka.Brokers) > 0 && redisAddr == "" {
		// Kafka spreads the work over processes that must share the batches' state.
		lines = append(lines, "batch.kafka needs redis.addr: replicas and workers share batch state there")
	}
	if c.Kafka.Partitions < 0 || c.Concurrency < 0 || c.Attempts < 0 || c.ChunkLines < 0 || c.MaxLines < 0 || c.MaxFileBytes < 0 || c.MaxLineBytes < 0 || c.RedisTimeout < 0 {
		lines = append(lines, "batch: counts and sizes must not be negative")
	}
	if err := c.limits().Validate(); err != nil {
		lines = append(lines, "batch.concurrency_by_model: "+err.Error())
	}
	return lines
}

// batchParts are the batch components of one process.
type batchParts struct {
	service *batch.Service // nil in a batch-worker process
	worker  *batch.Worker  // nil when this gateway runs no lines
	metrics *batch.Metrics
	state   batchstate.Store // the batches' state, for the console
}

// newBatch builds the Files and Batches API and the batch worker: files in a directory, state in
// Redis when there is one (else in-process), work over Kafka when brokers are configured (else a
// GoChannel in this process).
func newBatch(cfg *Config, role string, rdb rueidis.Client, caller batch.Caller, log *slog.Logger, closers *[]func()) (*batchParts, error) {
	c := cfg.Batch
	if c.Disabled {
		log.Info("batch API disabled")
		return nil, nil
	}
	dir := c.Dir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "infergate", "files")
	}
	fs, err := files.NewDir(dir)
	if err != nil {
		return nil, fmt.Errorf("batch.dir: %w", err)
	}
	var state batchstate.Store = batchstate.NewMemory()
	if rdb != nil {
		state = batchstate.NewRedis(rdb, batchstate.RedisOptions{Prefix: redisPrefix(cfg)})
	}
	var b bus.Bus
	topics := batch.DefaultTopics()
	maxLine := c.MaxLineBytes
	if len(c.Kafka.Brokers) > 0 {
		if maxLine == 0 {
			maxLine = 900_000
		}
		if c.Kafka.TopicPrefix != "" {
			topics = batch.TopicsWithPrefix(c.Kafka.TopicPrefix)
		}
		b, err = bus.NewKafka(bus.KafkaConfig{Brokers: c.Kafka.Brokers, Partitions: int32(c.Kafka.Partitions),
			ClientID: "infergate-" + role}, log)
		if err != nil {
			return nil, fmt.Errorf("batch.kafka: %w", err)
		}
	} else {
		b = bus.NewGoChannel(log)
	}
	*closers = append(*closers, func() { _ = b.Close() })

	redispatch := c.RedispatchAfter
	if redispatch == 0 && rdb != nil && len(c.Kafka.Brokers) == 0 {
		redispatch = 2 * time.Minute
	}
	p := &batchParts{metrics: batch.NewMetrics(), state: state}
	if role != RoleBatchWorker {
		p.service, err = batch.New(batch.Options{Files: fs, State: state, Bus: b, Topics: topics, Logger: log,
			Metrics: p.metrics, MaxFileBytes: int64(c.MaxFileBytes), MaxLines: c.MaxLines, MaxLineBytes: maxLine, ChunkLines: c.ChunkLines,
			RedispatchAfter: redispatch, StoreTimeout: c.RedisTimeout})
		if err != nil {
			return nil, err
		}
	}
	if role == RoleBatchWorker || c.worker() {
		var sem slots.Semaphore = slots.NewLocal(c.limits())
		if rdb != nil {
			// Every worker on this Redis shares the bound; closed after the worker stopped
			// (closers run last first), giving the slots back.
			rs := slots.NewRedis(rdb, c.limits(), slots.RedisOptions{Prefix: redisPrefix(cfg) + ":batch:slots:", Logger: log})
			*closers = append(*closers, rs.Close)
			sem = rs
		}
		p.worker = batch.NewWorker(batch.WorkerOptions{Bus: b, State: state, Caller: caller, Topics: topics, Logger: log,
			Slots: sem, Concurrency: c.limits().Default, Attempts: c.Attempts, RetryBackoff: c.RetryBackoff, Metrics: p.metrics})
	}
	log.Info("batch API", "role", role, "files", dir, "state", map[bool]string{true: "redis", false: "memory"}[rdb != nil],
		"bus", map[bool]string{true: "kafka", false: "in-process"}[len(c.Kafka.Brokers) > 0], "worker", p.worker != nil)
	return p, nil
}

// start runs the service's collector and sweeper and the worker until closeAll stops them; the
// worker stops first so lines in flight are handed back to the bus before it closes.
func (p *batchParts) start(ctx context.Context, log *slog.Logger, closers *[]func()) {
	run := func(name string, f func(context.Context) error) {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := f(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error(name+" stopped", "err", err)
			}
		}()
		*closers = append(*closers, func() { cancel(); <-done })
	}
	if p.service != nil {
		run("batch service", p.service.Run)
		*closers = append(*closers, p.service.Close)
	}
	if p.worker != nil {
		run("batch worker", p.worker.Run)
	}
}

func (p *batchParts) collectors() []prometheus.Collector { return p.metrics.Collectors() }
