package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/infergate/infergate/adapters/openai"
	"go.yaml.in/yaml/v3"
)

// fileConfig is the YAML file -config names. Unknown keys are errors, so a typo does not silently
// turn a feature off.
type fileConfig struct {
	// Upstreams are the servers behind the OpenAI surface (vLLM, OpenAI, Ollama; kserve later).
	Upstreams []openai.Endpoint `yaml:"upstreams"`
}

func loadConfig(path string) (*fileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, data)
}

// parseConfig decodes and validates one config document; every error names the file, and
// validation errors the endpoint and field too, one per line.
func parseConfig(name string, data []byte) (*fileConfig, error) {
	var c fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := openai.ValidateEndpoints(c.Upstreams); err != nil {
		var lines []string
		for _, e := range unjoin(err) {
			lines = append(lines, fmt.Sprintf("%s: upstreams: %v", name, e))
		}
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	return &c, nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
