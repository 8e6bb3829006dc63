package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/infergate/infergate/core/httpapi"
)

func TestTruncate(t *testing.T) {
	assert.Equal(t, "héé...", httpapi.Truncate("héé€", 6), "a cut never splits a character")
	assert.Equal(t, "short", httpapi.Truncate("short", 6))
}

func TestCeilSeconds(t *testing.T) {
	assert.EqualValues(t, 1, httpapi.CeilSeconds(0), "Retry-After is at least 1")
	assert.EqualValues(t, 2, httpapi.CeilSeconds(1500*time.Millisecond), "rounded up: waiting less would be refused again")
}
