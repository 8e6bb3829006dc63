package breaker

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	require.Equal(t, Success, Classify(200, nil))
	require.Equal(t, Success, Classify(404, nil))
	require.Equal(t, Throttled, Classify(429, nil))
	require.Equal(t, Failure, Classify(500, nil))
	require.Equal(t, Failure, Classify(503, nil))
	require.Equal(t, Failure, Classify(0, errors.New("connection refused")))
	require.Equal(t, Failure, Classify(0, context.DeadlineExceeded))
	require.Equal(t, Ignored, Classify(0, context.Canceled))
}
