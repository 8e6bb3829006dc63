// Package guard protects every model behind the gateway, whatever protocol a request came in on:
// API keys (who may call, and which models), load shedding (bounded in-flight requests with a
// bounded, prioritised wait), and, with its subpackages, rate limits and circuit breakers shared
// by every replica through Redis.
package guard
