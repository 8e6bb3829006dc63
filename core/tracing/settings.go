package tracing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
)

// Triton's trace setting names, as TraceSetting and /v2/trace/setting answer them.
const (
	SettingLevel        = "trace_level"
	SettingRate         = "trace_rate"
	SettingCount        = "trace_count"
	SettingLogFrequency = "log_frequency"
	SettingFile         = "trace_file"
	SettingMode         = "trace_mode"
)

// Unsupported is the error for a setting infergate cannot honour (Triton's UNSUPPORTED: gRPC
// UNIMPLEMENTED, HTTP 501); every other settings error is an invalid argument.
type Unsupported string

func (e Unsupported) Error() string { return string(e) }

// Level is Triton's trace level: a set of TIMESTAMPS and TENSORS, or OFF (zero).
type Level uint8

const (
	LevelTimestamps Level = 1 << iota
	LevelTensors
)

// Strings is the level as Triton lists it: ["OFF"], or the levels set.
func (l Level) Strings() []string {
	if l == 0 {
		return []string{"OFF"}
	}
	var out []string
	if l&LevelTimestamps != 0 {
		out = append(out, "TIMESTAMPS")
	}
	if l&LevelTensors != 0 {
		out = append(out, "TENSORS")
	}
	return out
}

// ParseLevel reads Triton's trace level list: "OFF" alone, or any of TIMESTAMPS and TENSORS.
// Triton ignores names it does not know; so does this.
func ParseLevel(values []string) (Level, error) {
	var l Level
	for _, v := range values {
		switch v {
		case "OFF":
			if len(values) != 1 {
				return 0, errors.New("Expect only one trace level 'OFF' is specified")
			}
		case "TIMESTAMPS":
			l |= LevelTimestamps
		case "TENSORS":
			l |= LevelTensors
		}
	}
	return l, nil
}

// Settings are one scope's trace settings (the server's, or a model's).
type Settings struct {
	Level Level
	// Rate traces one request of every Rate (Triton's default is 1000); 0 traces none.
	Rate uint32
	// Count is how many more requests may be traced; -1 is no limit.
	Count int32
	// LogFrequency and File are Triton's trace file settings: kept and reported, since spans go
	// to the OTLP exporter, not to files.
	LogFrequency uint32
	File         string
}

// DefaultSettings are Triton's defaults: off, one in 1000 once turned on, no count limit.
var DefaultSettings = Settings{Level: 0, Rate: 1000, Count: -1}

// update is a parsed settings request: for each field, whether it is set, cleared (back to the
// enclosing scope's value) or left alone.
type update struct {
	level, rate, count, logFreq       *int64 // value (a Level for level)
	clearLevel, clearRate, clearCount bool
	clearLogFreq                      bool
}

// maxSettingValues bounds the values one setting may carry: Triton's longest list is
// trace_level's ("TIMESTAMPS", "TENSORS"); a request with thousands is refused, not scanned.
const maxSettingValues = 8

// ParseUpdate reads a TraceSetting request's settings (gRPC's map of string lists; REST's JSON
// converted to it, null as an empty list): an empty list clears the setting, one value sets it.
// Errors carry Triton's messages; trace_file is refused (ErrUnsupported) as Triton refuses it.
// Unknown names are ignored, as Triton ignores them.
func ParseUpdate(settings map[string][]string) (update, error) {
	var u update
	if _, ok := settings[SettingFile]; ok {
		return u, Unsupported("trace file location can not be updated through network protocol")
	}
	if v, ok := settings[SettingLevel]; ok {
		if len(v) > maxSettingValues {
			return u, fmt.Errorf("expect at most %d values for '%s'", maxSettingValues, SettingLevel)
		}
		if len(v) == 0 {
			u.clearLevel = true
		} else {
			l, err := ParseLevel(v)
			if err != nil {
				return u, err
			}
			n := int64(l)
			u.level = &n
		}
	}
	num := func(name string, lo, hi int64, dst **int64, clear *bool) error {
		v, ok := settings[name]
		switch {
		case !ok:
			return nil
		case len(v) == 0:
			*clear = true
			return nil
		case len(v) > 1:
			return fmt.Errorf("expect only 1 value for '%s'", name)
		}
		n, err := parseInt(v[0])
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return fmt.Errorf("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, lo, hi, v[0])
			}
			return fmt.Errorf("Unable to parse '%s', got: %s", name, v[0])
		}
		if name == SettingCount && n < lo {
			return fmt.Errorf("Unable to parse '%s'. Expecting value >= %d, got: %s", name, lo, v[0])
		}
		if n < lo || n > hi {
			return fmt.Errorf("Unable to parse '%s', value is out of range [ %d, %d ], got: %s", name, lo, hi, v[0])
		}
		*dst = &n
		return nil
	}
	if err := num(SettingRate, 0, math.MaxUint32, &u.rate, &u.clearRate); err != nil {
		return u, err
	}
	if err := num(SettingCount, -1, math.MaxInt32, &u.count, &u.clearCount); err != nil {
		return u, err
	}
	if err := num(SettingLogFrequency, 0, math.MaxUint32, &u.logFreq, &u.clearLogFreq); err != nil {
		return u, err
	}
	return u, nil
}

// parseInt reads a decimal integer as C++'s std::stoi does for Triton: leading space and a sign,
// then digits, ignoring what follows them ("12abc" is 12); no digits is an error.
func parseInt(s string) (int64, error) {
	s = strings.TrimLeft(s, " \t\n\r\f\v")
	end := 0
	if end < len(s) && (s[end] == '+' || s[end] == '-') {
		end++
	}
	digits := end
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	if end == digits {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseInt(s[:end], 10, 32)
	if err != nil {
		return 0, strconv.ErrRange
	}
	return n, nil
}

// counters are a scope's sampling state, shared by every snapshot of it so that a settings change
// keeps the requests seen and the traces left.
type counters struct {
	seen      atomic.Uint64
	remaining atomic.Int64 // -1: no limit
}

// override is a model's own settings: nil fields follow the server's.
type override struct {
	level, rate, count, logFreq *int64
	own                         *counters // the model's counters, when it has its own rate or count
}

// scope is what a request's sampling decision reads: effective settings and the counters.
type scope struct {
	level Level
	rate  uint32
	c     *counters
}

// snapshot is the settings sampling reads without a lock; updates replace it whole.
type snapshot struct {
	global *scope
	models map[string]*scope
	on     bool // some scope traces
}

func (sn *snapshot) scopeFor(model string) *scope {
	if s, ok := sn.models[model]; ok {
		return s
	}
	return sn.global
}

// sample decides whether one more request in this scope is traced: every rate-th request while
// the count lasts.
func (s *scope) sample() bool {
	if s.level == 0 || s.rate == 0 {
		return false
	}
	if s.c.seen.Add(1)%uint64(s.rate) != 0 {
		return false
	}
	for {
		r := s.c.remaining.Load()
		switch {
		case r < 0:
			return true
		case r == 0:
			return false
		case s.c.remaining.CompareAndSwap(r, r-1):
			return true
		}
	}
}
