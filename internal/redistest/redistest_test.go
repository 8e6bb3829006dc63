package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	c := s.NewClient(t)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error())

	s.Kill()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	assert.Error(t, ping(pctx, s.Addr), "killed server does not answer")

	addr := s.Addr
	s.Restart()
	assert.Equal(t, addr, s.Addr, "same port")
	require.NoError(t, ping(ctx, s.Addr))
	// Nothing persisted: the key is gone. The client reconnects by itself.
	require.Eventually(t, func() bool {
		err := c.Do(ctx, c.B().Get().Key("k").Build()).Error()
		return err != nil && isNil(err)
	}, 5*time.Second, 20*time.Millisecond)
}

// The server answers with persistence off, so tests never write dump files.
func TestNoPersistence(t *testing.T) {
	s := Start(t)
	c := s.NewClient(t)
	got, err := c.Do(context.Background(), c.B().ConfigGet().Parameter("save").Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "", got["save"])
	got, err = c.Do(context.Background(), c.B().ConfigGet().Parameter("appendonly").Build()).AsStrMap()
	require.NoError(t, err)
	assert.Equal(t, "no", got["appendonly"])
}

// recorder is a testing.TB that records Skip and Fatal instead of ending the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

type stop struct{}

func (r *recorder) Helper()        {}
func (r *recorder) Cleanup(func()) {}
func (r *recorder) Skip(args ...any) {
	r.skipped = args[0].(string)
	panic(stop{})
}
func (r *recorder) Fatal(args ...any) {
	r.failed = args[0].(string)
	panic(stop{})
}

func run(r *recorder) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stop); !ok {
				panic(v)
			}
		}
	}()
	Start(r)
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())

	t.Setenv(RequireEnv, "")
	r := &recorder{TB: t}
	run(r)
	assert.Contains(t, r.skipped, "redis-server not found; install it (apt-get install redis-server)")
	assert.Empty(t, r.failed)

	t.Setenv(RequireEnv, "1")
	r = &recorder{TB: t}
	run(r)
	assert.Contains(t, r.failed, "redis-server not found")
	assert.Empty(t, r.skipped)
}

func isNil(err error) bool { return rueidis.IsRedisNil(err) }
