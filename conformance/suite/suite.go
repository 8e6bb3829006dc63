// Package suite checks a KServe v2 inference server, over gRPC and optionally REST, against the
// KServe v2 / Open Inference Protocol and Triton's extensions and behaviour. Each Check has a
// stable ID and one outcome; Run runs the selected checks against a live server and returns a
// Report that can be printed as a table, JSON or JUnit XML.
//
// The suite knows nothing about the server it checks beyond what the protocol tells it: models
// come from RepositoryIndex (or Config.Models), shapes from ModelMetadata and ModelConfig. It
// encodes and decodes tensors with its own code, so a bug in a server's codec cannot hide behind
// the same bug in the checker.
package suite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// Class says which specification a check holds a server to.
type Class string

const (
	// Standard checks hold what the KServe v2 text requires (or what gRPC's status codes make
	// plainly wrong, such as INTERNAL for a client's mistake): a failure is a FAIL.
	Standard Class = "standard"
	// Recommended checks hold what the v2 text suggests or gRPC's status semantics imply without
	// requiring it: a failure is reported as WARN.
	Recommended Class = "recommended"
	// TritonExtension checks follow Triton's extensions, example models and documented
	// behaviour. They run where the server advertises the extension or calls itself Triton, and
	// skip (or warn) elsewhere.
	TritonExtension Class = "triton-extension"
	// Infergate checks hold infergate's own conventions (the LLM tensor contract, one error text
	// for REST and gRPC). A failure is a FAIL only with Config.Infergate; elsewhere it is a WARN.
	Infergate Class = "infergate"
)

// Classes lists the classes in the order reports show them.
func Classes() []Class { return []Class{Standard, Recommended, TritonExtension, Infergate} }

// Citation is the sentence a check enforces, quoted exactly, and where it comes from.
type Citation struct {
	// Source is the document: a repository and path (or an RFC), e.g.
	// "kserve/kserve docs/predict-api/v2/required_api.md".
	Source string `json:"source"`
	// Text is the sentence (or the shortest exact part of it that carries the rule).
	Text string `json:"text"`
}

func (c Citation) String() string { return fmt.Sprintf("%q (%s)", c.Text, c.Source) }

// Outcome is the result of one check.
type Outcome string

const (
	Pass Outcome = "pass"
	Fail Outcome = "fail"
	// Warn marks a divergence the protocol allows, such as NOT_FOUND instead of ready=false.
	Warn Outcome = "warn"
	// Skip means the check could not run: the server does not advertise the extension, the model
	// it needs is absent, or no REST address was given.
	Skip Outcome = "skip"
)

// Check is one conformance check.
type Check struct {
	// ID is stable across releases: reports and -run patterns refer to it. Its prefix up to the
	// first dot is the check's group.
	ID    string
	Title string
	Class Class
	// Cite is the sentence the check enforces; Class follows from it.
	Cite Citation
	// Item is the number of the checklist item the check covers (0 when it has none).
	Item int
	Run  func(t *T)
}

// Group is the part of the ID before the first dot.
func (c Check) Group() string {
	g, _, _ := strings.Cut(c.ID, ".")
	return g
}

// Result is what one check found.
type Result struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Class Class  `json:"class"`
	Group string `json:"group"`
	// Citation is the check's Cite.
	Citation Citation      `json:"citation"`
	Outcome  Outcome       `json:"outcome"`
	Message  string        `json:"message,omitempty"`
	Expect   string        `json:"expected,omitempty"`
	Got      string        `json:"got,omitempty"`
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// Config says which server to check and how.
type Config struct {
	// GRPCAddr is the server's gRPC address, host:port (cleartext HTTP/2). Required.
	GRPCAddr string
	// HTTPURL is the base URL of the server's KServe v2 REST API, e.g. http://localhost:8000.
	// Empty skips the REST checks.
	HTTPURL string
	// Models lists the models to check when the server has no RepositoryIndex; with one, they
	// narrow the index to these names.
	Models []string
	// Run selects the checks whose ID matches; nil runs all.
	Run *regexp.Regexp
	// Timeout bounds each check; default 30 s.
	Timeout time.Duration
	// DialOptions are added to the gRPC client's (for TLS or an in-memory dialer).
	DialOptions []grpc.DialOption
	// HTTPClient is used for REST calls; default a client with no overall timeout.
	HTTPClient *http.Client
	// Progress, when set, is called after each check with its result.
	Progress func(Result)
	// Infergate holds the server to infergate's own conventions too: Infergate-class failures
	// are FAILs instead of WARNs. infergate's own tests set it.
	Infergate bool
}

// ErrModelsRequired is returned by Run when Config.Models is empty and the server cannot list its
// models: RepositoryIndex (Triton's model_repository extension, not part of KServe v2) is
// unimplemented. It is a usage error: name the models to check.
var ErrModelsRequired = errors.New("the server cannot list its models (no RepositoryIndex): name the models to check (-model)")

// Report is the outcome of one run.
type Report struct {
	GRPCAddr      string        `json:"grpc_addr"`
	HTTPURL       string        `json:"http_url,omitempty"`
	ServerName    string        `json:"server_name,omitempty"`
	ServerVersion string        `json:"server_version,omitempty"`
	Extensions    []string      `json:"extensions,omitempty"`
	Models        []string      `json:"models"`
	Started       time.Time     `json:"started"`
	Elapsed       time.Duration `json:"elapsed_ns"`
	Results       []Result      `json:"results"`
	Summary       Summary       `json:"summary"`
}

// Summary counts results by outcome.
type Summary struct {
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	Warned  int `json:"warned"`
	Skipped int `json:"skipped"`
}

func (s Summary) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d warned, %d skipped", s.Passed, s.Failed, s.Warned, s.Skipped)
}

// Result returns the result of the check with the given ID, if it ran.
func (r *Report) Result(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Run connects to the server, discovers its models and runs the selected checks in order. The
// error is for a run that could not start (bad address); everything the server does wrong is in
// the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.GRPCAddr == "" {
		return nil, fmt.Errorf("conformance: a gRPC address is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	cfg.HTTPURL = strings.TrimRight(cfg.HTTPURL, "/")
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if e.needModels != nil {
		return nil, fmt.Errorf("conformance: %w; RepositoryIndex answered %s", ErrModelsRequired, describeErr(e.needModels))
	}
	rep := &Report{GRPCAddr: cfg.GRPCAddr, HTTPURL: cfg.HTTPURL, Started: time.Now(), Models: e.modelNames()}
	if e.server != nil {
		rep.ServerName, rep.ServerVersion, rep.Extensions = e.server.GetName(), e.server.GetVersion(), e.server.GetExtensions()
	}
	for _, c := range Checks() {
		if cfg.Run != nil && !cfg.Run.MatchString(c.ID) {
			continue
		}
		res := runCheck(ctx, e, c)
		rep.Results = append(rep.Results, res)
		switch res.Outcome {
		case Pass:
			rep.Summary.Passed++
		case Fail:
			rep.Summary.Failed++
		case Warn:
			rep.Summary.Warned++
		case Skip:
			rep.Summary.Skipped++
		}
		if cfg.Progress != nil {
			cfg.Progress(res)
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// runCheck runs c in its own goroutine, so that T.Fail and T.Skip can end it from any depth the
// way testing.T does, and bounds it by the per-check timeout.
func runCheck(ctx context.Context, e *env, c Check) Result {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	t := &T{ctx: ctx, env: e, res: Result{ID: c.ID, Title: c.Title, Class: c.Class, Group: c.Group(), Citation: c.Cite, Outcome: Pass}}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			for i := len(t.cleanups) - 1; i >= 0; i-- {
				t.cleanups[i]()
			}
		}()
		defer func() {
			if p := recover(); p != nil {
				t.mu.Lock()
				t.res.Outcome, t.res.Message, t.panicked = Fail, fmt.Sprintf("check panicked: %v", p), true
				t.mu.Unlock()
			}
		}()
		c.Run(t)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// A check that ignores its context is abandoned rather than allowed to stall the run.
		t.mu.Lock()
		if t.res.Outcome != Fail {
			t.res.Outcome, t.res.Message, t.res.Expect, t.res.Got = Fail, "", "", ""
		}
		t.timedOut = true
		t.mu.Unlock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.res.Outcome == Fail && (t.timedOut || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		strings.Contains(t.res.Got+t.res.Message, codeName(codes.DeadlineExceeded))) {
		// The server did not answer in time (the server's copy of the deadline, grpc-timeout,
		// may expire before the client's). That fails whatever the class: it did not answer.
		t.timedOut = true
		if note := "no answer within " + e.cfg.Timeout.String() + " (-timeout)"; !strings.Contains(t.res.Message, note) {
			t.res.Message = strings.TrimPrefix(t.res.Message+"; "+note, "; ")
		}
	}
	res := t.res
	if res.Outcome == Fail && !t.timedOut && !t.panicked {
		if why := softClass(c.Class, e.cfg); why != "" {
			// The rule is not the v2 text's: report the divergence without failing the server.
			t.warnings = append(t.warnings, why+": "+res.detail())
			res.Outcome, res.Message, res.Expect, res.Got = Warn, "", "", ""
		}
	}
	if res.Outcome == Pass && len(t.warnings) > 0 {
		res.Outcome = Warn
	}
	if len(t.warnings) > 0 && res.Outcome == Warn {
		res.Message = strings.Join(append(t.warnings, res.Message), "; ")
		res.Message = strings.TrimSuffix(res.Message, "; ")
	}
	res.Elapsed = time.Since(start)
	return res
}

// T is a running check's handle, like testing.T: Fail, Skip and their variants end the check.
type T struct {
	ctx      context.Context
	env      *env
	mu       sync.Mutex
	res      Result
	warnings []string
	// timedOut and panicked mark failures that no class softens.
	timedOut, panicked bool
	cleanups           []func() // run last first when the check ends, however it ends
}

// cleanup registers f to run when the check ends (after Fail and Skip too), as testing.T's
// Cleanup does. f must not end the check itself.
func (t *T) cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

// softClass says why a failure of a check of class c is reported as a warning, or "" when it is
// a failure.
func softClass(c Class, cfg Config) string {
	switch {
	case c == Recommended:
		return "recommended, not required by the v2 text"
	case c == Infergate && !cfg.Infergate:
		return "infergate's own convention, not a v2 rule"
	}
	return ""
}

// Context is cancelled when the check's time is up.
func (t *T) Context() context.Context { return t.ctx }

// Fail ends the check as failed, with what the protocol expects and what the server did.
func (t *T) Fail(expected, got string) {
	t.end(Fail, "", expected, got)
}

// Failf ends the check as failed with a message.
func (t *T) Failf(format string, args ...any) {
	t.end(Fail, fmt.Sprintf(format, args...), "", "")
}

// Skip ends the check without a verdict, saying why it could not run.
func (t *T) Skip(format string, args ...any) {
	t.end(Skip, fmt.Sprintf(format, args...), "", "")
}

// Warn records an allowed divergence; the check goes on and ends as warn unless it fails.
func (t *T) Warn(format string, args ...any) {
	t.mu.Lock()
	t.warnings = append(t.warnings, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

// Note sets the message a passing check reports, e.g. what it exercised.
func (t *T) Note(format string, args ...any) {
	t.mu.Lock()
	t.res.Message = fmt.Sprintf(format, args...)
	t.mu.Unlock()
}

func (t *T) end(o Outcome, msg, expected, got string) {
	t.mu.Lock()
	t.res.Outcome, t.res.Message, t.res.Expect, t.res.Got = o, msg, expected, got
	t.mu.Unlock()
	runtime.Goexit()
}
