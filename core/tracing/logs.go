package tracing

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Triton's log setting names, as LogSettings and /v2/logging answer them.
const (
	LogFile         = "log_file"
	LogInfo         = "log_info"
	LogWarning      = "log_warning"
	LogError        = "log_error"
	LogVerboseLevel = "log_verbose_level"
	LogFormat       = "log_format"
)

// LogValue is one log setting's value: exactly one of its fields is set, as in LogSettings'
// oneof (REST's JSON true/false, a number, a string).
type LogValue struct {
	Bool   *bool
	Uint32 *uint32
	String *string
}

// Logs maps Triton's log settings onto a slog.LevelVar the process's handler reads, so a change
// takes effect at once: log_verbose_level > 0 is Debug; else the lowest of info, warning, error
// that is on; with all three off, nothing below a level above Error is logged.
type Logs struct {
	mu                sync.Mutex
	lv                *slog.LevelVar
	info, warn, error bool
	verbose           uint32
	format            string
}

// levelOff is above every level infergate logs at.
const levelOff = slog.LevelError + 4

// NewLogs returns the log settings for lv, reading its level as they start.
func NewLogs(lv *slog.LevelVar) *Logs {
	l := &Logs{lv: lv, format: "default"}
	cur := lv.Level()
	l.info, l.warn, l.error = cur <= slog.LevelInfo, cur <= slog.LevelWarn, cur <= slog.LevelError
	if cur < slog.LevelInfo {
		l.verbose = 1
	}
	return l
}

// Get answers the settings in LogSettings' shape.
func (l *Logs) Get() map[string]LogValue {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.getLocked()
}

func (l *Logs) getLocked() map[string]LogValue {
	b := func(v bool) LogValue { return LogValue{Bool: &v} }
	s := func(v string) LogValue { return LogValue{String: &v} }
	v := l.verbose
	return map[string]LogValue{
		LogFile: s(""), LogInfo: b(l.info), LogWarning: b(l.warn), LogError: b(l.error),
		LogVerboseLevel: {Uint32: &v}, LogFormat: s(l.format),
	}
}

// Update applies a LogSettings request, all or nothing, and answers the settings now in force.
// Errors carry Triton's messages; log_file is refused (Unsupported): infergate logs to its
// standard error, which the process's supervisor collects.
func (l *Logs) Update(settings map[string]LogValue) (map[string]LogValue, error) {
	if _, ok := settings[LogFile]; ok {
		return nil, Unsupported("log file location can not be updated through network protocol")
	}
	boolean := func(name string, dst *bool) (func(), error) {
		v, ok := settings[name]
		if !ok {
			return nil, nil
		}
		if v.Bool == nil {
			return nil, fmt.Errorf("expect boolean for '%s'", name)
		}
		return func() { *dst = *v.Bool }, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var apply []func()
	for _, s := range []struct {
		name string
		dst  *bool
	}{{LogInfo, &l.info}, {LogWarning, &l.warn}, {LogError, &l.error}} {
		f, err := boolean(s.name, s.dst)
		if err != nil {
			return nil, err
		}
		if f != nil {
			apply = append(apply, f)
		}
	}
	if v, ok := settings[LogVerboseLevel]; ok {
		if v.Uint32 == nil {
			return nil, fmt.Errorf("expect int32 for '%s'", LogVerboseLevel)
		}
		apply = append(apply, func() { l.verbose = *v.Uint32 })
	}
	if v, ok := settings[LogFormat]; ok {
		if v.String == nil {
			return nil, fmt.Errorf("expect string for '%s'", LogFormat)
		}
		// slog's timestamps are RFC 3339, an ISO 8601 profile, in either format.
		if *v.String != "default" && *v.String != "ISO8601" {
			return nil, errors.New("invalid argument for log_format, got: " + *v.String)
		}
		apply = append(apply, func() { l.format = *v.String })
	}
	for _, f := range apply {
		f()
	}
	l.lv.Set(l.level())
	return l.getLocked(), nil
}

// level is the slog level the settings amount to.
func (l *Logs) level() slog.Level {
	switch {
	case l.verbose > 0:
		return slog.LevelDebug
	case l.info:
		return slog.LevelInfo
	case l.warn:
		return slog.LevelWarn
	case l.error:
		return slog.LevelError
	}
	return levelOff
}
