package gateway

// WithoutHardening is cfg for a gateway without issue 17's per-request checks, the baseline
// of BenchmarkHardening.
func WithoutHardening(cfg Config) Config {
	cfg.unhardened = true
	return cfg
}
