package breaker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// change is a published state change: "gen st dl cool endpoint", dl and cool in ms from the
// publishing script's now. The endpoint is last, so it may contain spaces.
type change struct {
	endpoint string
	r        reply
}

// maxLeft bounds the deadlines a message may carry, so a bad one cannot overflow the clock.
const maxLeft = int64(30 * 24 * time.Hour / time.Millisecond)

func parseChange(msg string) (change, error) {
	var n [4]int64
	rest := msg
	for i := range n {
		field, tail, ok := strings.Cut(rest, " ")
		if !ok {
			return change{}, fmt.Errorf("breaker change %q: want 5 fields", msg)
		}
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil || v < 0 {
			return change{}, fmt.Errorf("breaker change %q: field %d is not a non-negative integer", msg, i+1)
		}
		n[i], rest = v, tail
	}
	if n[1] > 2 {
		return change{}, fmt.Errorf("breaker change %q: unknown state %d", msg, n[1])
	}
	if rest == "" {
		return change{}, errors.New("breaker change without an endpoint")
	}
	return change{endpoint: rest, r: reply{
		state: State(n[1]), gen: uint64(n[0]), dlMs: min(n[2], maxLeft), coolMs: min(n[3], maxLeft),
	}}, nil
}
