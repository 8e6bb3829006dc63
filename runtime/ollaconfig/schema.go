package ollaconfig

import "time"

// The types below mirror Olla's config file (thushan/olla internal/config/types.go) key for key,
// so that strict decoding rejects a misspelt key instead of dropping it the way Olla does. They
// also hold the keys Olla's shipped config.yaml carries that its code does not read
// (proxy.retry, server.rate_limits.per_endpoint, discovery.health_check): a real file must convert.

type ollaConfig struct {
	ModelAliases  map[string][]string `yaml:"model_aliases"`
	Logging       loggingConfig       `yaml:"logging"`
	Dashboard     dashboardConfig     `yaml:"dashboard"`
	Translators   translatorsConfig   `yaml:"translators"`
	ModelRegistry modelRegistryConfig `yaml:"model_registry"`
	Discovery     discoveryConfig     `yaml:"discovery"`
	Proxy         proxyConfig         `yaml:"proxy"`
	Server        serverConfig        `yaml:"server"`
	Engineering   engineeringConfig   `yaml:"engineering"`
}

type serverConfig struct {
	Host              string             `yaml:"host"`
	Port              int                `yaml:"port"`
	Cors              corsConfig         `yaml:"cors"`
	RateLimits        rateLimitsConfig   `yaml:"rate_limits"`
	RequestLimits     requestLimitConfig `yaml:"request_limits"`
	ReadTimeout       time.Duration      `yaml:"read_timeout"`
	ReadHeaderTimeout time.Duration      `yaml:"read_header_timeout"`
	WriteTimeout      time.Duration      `yaml:"write_timeout"`
	IdleTimeout       time.Duration      `yaml:"idle_timeout"`
	ShutdownTimeout   time.Duration      `yaml:"shutdown_timeout"`
	RequestLogging    bool               `yaml:"request_logging"`
}

type corsConfig struct {
	AllowedOrigins   []string `yaml:"allowed_origins"`
	AllowedMethods   []string `yaml:"allowed_methods"`
	AllowedHeaders   []string `yaml:"allowed_headers"`
	ExposedHeaders   []string `yaml:"exposed_headers"`
	MaxAge           int      `yaml:"max_age"`
	Enabled          bool     `yaml:"enabled"`
	AllowCredentials bool     `yaml:"allow_credentials"`
}

type rateLimitsConfig struct {
	TrustedProxyCIDRs       []string `yaml:"trusted_proxy_cidrs"`
	GlobalRequestsPerMinute int      `yaml:"global_requests_per_minute"`
	PerIPRequestsPerMinute  int      `yaml:"per_ip_requests_per_minute"`
	BurstSize               int      `yaml:"burst_size"`
	HealthRequestsPerMinute int      `yaml:"health_requests_per_minute"`
	// PerEndpoint is in Olla's sample config; nothing in Olla reads it.
	PerEndpoint struct {
		DefaultRequestsPerMinute int `yaml:"default_requests_per_minute"`
	} `yaml:"per_endpoint"`
	CleanupInterval   time.Duration `yaml:"cleanup_interval"`
	TrustProxyHeaders bool          `yaml:"trust_proxy_headers"`
}

type requestLimitConfig struct {
	MaxBodySize   int64 `yaml:"max_body_size"`
	MaxHeaderSize int64 `yaml:"max_header_size"`
}

type filterConfig struct {
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
}

type proxyConfig struct {
	ProfileFilter  *filterConfig `yaml:"profile_filter"`
	Engine         string        `yaml:"engine"`
	LoadBalancer   string        `yaml:"load_balancer"`
	Profile        string        `yaml:"profile"`
	StickySessions struct {
		KeySources      []string `yaml:"key_sources"`
		MaxSessions     uint64   `yaml:"max_sessions"`
		IdleTTLSeconds  int      `yaml:"idle_ttl_seconds"`
		PrefixHashBytes int      `yaml:"prefix_hash_bytes"`
		Enabled         bool     `yaml:"enabled"`
	} `yaml:"sticky_sessions"`
	ConnectionTimeout     time.Duration `yaml:"connection_timeout"`
	ConnectionKeepAlive   time.Duration `yaml:"connection_keep_alive"`
	ResponseTimeout       time.Duration `yaml:"response_timeout"`
	ReadTimeout           time.Duration `yaml:"read_timeout"`
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	TLSHandshakeTimeout   time.Duration `yaml:"tls_handshake_timeout"`
	RetryBackoff          time.Duration `yaml:"retry_backoff"`
	StreamBufferSize      int           `yaml:"stream_buffer_size"`
	MaxRetries            int           `yaml:"max_retries"`
	// Retry is in Olla's sample config, documented there as applying to both engines.
	Retry struct {
		Enabled             bool `yaml:"enabled"`
		OnConnectionFailure bool `yaml:"on_connection_failure"`
		MaxAttempts         int  `yaml:"max_attempts"`
	} `yaml:"retry"`
}

type discoveryConfig struct {
	Type            string        `yaml:"type"`
	RefreshInterval time.Duration `yaml:"refresh_interval"`
	HealthCheck     struct {
		InitialDelay time.Duration `yaml:"initial_delay"`
	} `yaml:"health_check"`
	Static struct {
		// Endpoints is a pointer so that a file without the key (Olla then keeps its built-in
		// localhost Ollama endpoint) differs from an empty list (no endpoints).
		Endpoints *[]endpointConfig `yaml:"endpoints"`
	} `yaml:"static"`
	ModelDiscovery struct {
		Enabled           bool          `yaml:"enabled"`
		Interval          time.Duration `yaml:"interval"`
		Timeout           time.Duration `yaml:"timeout"`
		ConcurrentWorkers int           `yaml:"concurrent_workers"`
		RetryAttempts     int           `yaml:"retry_attempts"`
		RetryBackoff      time.Duration `yaml:"retry_backoff"`
	} `yaml:"model_discovery"`
}

type authConfig struct {
	Type         string `yaml:"type"`
	Header       string `yaml:"header"`
	Token        string `yaml:"token"`
	TokenFile    string `yaml:"token_file"`
	Key          string `yaml:"key"`
	KeyFile      string `yaml:"key_file"`
	Username     string `yaml:"username"`
	UsernameFile string `yaml:"username_file"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

type endpointConfig struct {
	ModelFilter    *filterConfig     `yaml:"model_filter"`
	Auth           *authConfig       `yaml:"auth"`
	Headers        map[string]string `yaml:"headers"`
	Priority       *int              `yaml:"priority"`
	URL            string            `yaml:"url"`
	Name           string            `yaml:"name"`
	Type           string            `yaml:"type"`
	HealthCheckURL string            `yaml:"health_check_url"`
	ModelURL       string            `yaml:"model_url"`
	CheckInterval  time.Duration     `yaml:"check_interval"`
	CheckTimeout   time.Duration     `yaml:"check_timeout"`
	PreservePath   bool              `yaml:"preserve_path"`
}

type modelRegistryConfig struct {
	Type            string `yaml:"type"`
	EnableUnifier   bool   `yaml:"enable_unifier"`
	RoutingStrategy struct {
		Type    string `yaml:"type"`
		Options struct {
			FallbackBehavior       string        `yaml:"fallback_behavior"`
			DiscoveryTimeout       time.Duration `yaml:"discovery_timeout"`
			DiscoveryRefreshOnMiss bool          `yaml:"discovery_refresh_on_miss"`
		} `yaml:"options"`
	} `yaml:"routing_strategy"`
	Unification struct {
		StaleThreshold  time.Duration `yaml:"stale_threshold"`
		CleanupInterval time.Duration `yaml:"cleanup_interval"`
	} `yaml:"unification"`
}

type translatorsConfig struct {
	Anthropic struct {
		Enabled            bool  `yaml:"enabled"`
		PassthroughEnabled bool  `yaml:"passthrough_enabled"`
		MaxMessageSize     int64 `yaml:"max_message_size"`
		Inspector          struct {
			OutputDir     string `yaml:"output_dir"`
			SessionHeader string `yaml:"session_header"`
			Enabled       bool   `yaml:"enabled"`
		} `yaml:"inspector"`
	} `yaml:"anthropic"`
}

type dashboardConfig struct {
	Enabled      bool `yaml:"enabled"`
	AccessPolicy struct {
		AllowedCIDRs []string `yaml:"allowed_cidrs"`
		AllowedHosts []string `yaml:"allowed_hosts"`
	} `yaml:"access_policy"`
	GateInternalAPI bool `yaml:"gate_internal_api"`
}

type engineeringConfig struct {
	ShowNerdStats bool `yaml:"show_nerdstats"`
}

type loggingConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
	Output string `yaml:"output"`
}
