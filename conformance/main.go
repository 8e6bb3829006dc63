// Command conformance checks a KServe v2 inference server (Triton, KServe, MLServer, Dynamo,
// infergate, ...) against the KServe v2 protocol and Triton's extensions:
//
//	go run ./conformance -grpc localhost:8001 [-http http://localhost:8000]
//
// It prints a table of checks, each passed, failed (with expected and got), warned (an allowed
// divergence) or skipped (with the reason), and exits 0 only when nothing failed. The checks
// live in package conformance/suite.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/infergate/infergate/conformance/suite"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			*s = append(*s, x)
		}
	}
	return nil
}

// run is main without the exit, for tests: 0 all passed (warnings and skips allowed), 1 a check
// failed, 2 the run could not start.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc", "", "gRPC address of the server, host:port (required)")
	httpURL := fs.String("http", "", "base URL of the server's KServe v2 REST API, e.g. http://localhost:8000 (REST checks skip without it)")
	var models stringList
	fs.Var(&models, "model", "model to check (repeatable or comma-separated); default: every ready model in RepositoryIndex, required when the server has none")
	runPattern := fs.String("run", "", "run only the checks whose ID matches this regular expression")
	timeout := fs.Duration("timeout", 30*time.Second, "time limit for each check")
	jsonFile := fs.String("json", "", "also write the report as JSON to this file")
	junitFile := fs.String("junit", "", "also write the report as JUnit XML to this file")
	colorMode := fs.String("color", "auto", "colour the table: auto (when stdout is a terminal), always or never")
	list := fs.Bool("list", false, "list the checks, each with its class and the sentence it enforces, and exit")
	strict := fs.Bool("infergate", false, "hold the server to infergate's own conventions too (their failures FAIL instead of WARN)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: conformance -grpc HOST:PORT [-http URL] [flags]\n\nChecks a KServe v2 inference server against the protocol and Triton's extensions.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, c := range suite.Checks() {
			fmt.Fprintf(stdout, "%-40s %-17s %s\n    %s\n", c.ID, c.Class, c.Title, c.Cite)
		}
		return 0
	}
	if *grpcAddr == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	cfg := suite.Config{GRPCAddr: *grpcAddr, HTTPURL: *httpURL, Models: models, Timeout: *timeout, Infergate: *strict}
	if *runPattern != "" {
		re, err := regexp.Compile(*runPattern)
		if err != nil {
			fmt.Fprintf(stderr, "conformance: -run: %v\n", err)
			return 2
		}
		cfg.Run = re
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := suite.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, suite.ErrModelsRequired) {
			fs.Usage()
		}
		return 2
	}
	if err := rep.WriteTable(stdout, useColor(*colorMode, stdout)); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := errors.Join(writeFile(*jsonFile, rep.WriteJSON), writeFile(*junitFile, rep.WriteJUnit)); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if rep.Summary.Failed > 0 {
		return 1
	}
	return 0
}

func writeFile(path string, write func(io.Writer) error) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("conformance: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("conformance: writing %s: %w", path, err)
	}
	return f.Close()
}

func useColor(mode string, w io.Writer) bool {
	switch mode {
	case "always":
		return true
	case "never":
		return false
	}
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
