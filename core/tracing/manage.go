package tracing

import (
	"fmt"
	"strconv"
)

// Get answers Triton's trace settings for model (empty: the server's) in TraceSetting's shape:
// each name with its values. trace_count is the count left.
func (t *Tracer) Get(model string) map[string][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.getLocked(model)
}

func (t *Tracer) getLocked(model string) map[string][]string {
	s, c := t.global, t.gc
	if o, ok := t.models[model]; ok && model != "" {
		s = o.apply(s)
		if o.own != nil {
			c = o.own
		}
	}
	count := c.remaining.Load()
	return map[string][]string{
		SettingLevel:        s.Level.Strings(),
		SettingRate:         {strconv.FormatUint(uint64(s.Rate), 10)},
		SettingCount:        {strconv.FormatInt(count, 10)},
		SettingLogFrequency: {strconv.FormatUint(uint64(s.LogFrequency), 10)},
		SettingFile:         {s.File},
		SettingMode:         {"opentelemetry"},
	}
}

// Update applies a TraceSetting request for model (empty: the server's) and answers the settings
// now in force, as Get does. Cleared settings go back to the server's (for a model) or to the
// settings the Tracer started with (for the server). The caller checks that model exists.
func (t *Tracer) Update(model string, settings map[string][]string) (map[string][]string, error) {
	u, err := ParseUpdate(settings)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if model == "" {
		t.updateGlobal(u)
	} else if err := t.updateModel(model, u); err != nil {
		return nil, err
	}
	t.publish()
	return t.getLocked(model), nil
}

func (t *Tracer) updateGlobal(u update) {
	g := &t.global
	switch {
	case u.clearLevel:
		g.Level = t.initial.Level
	case u.level != nil:
		g.Level = Level(*u.level)
	}
	switch {
	case u.clearRate:
		g.Rate = t.initial.Rate
	case u.rate != nil:
		g.Rate = uint32(*u.rate)
	}
	switch {
	case u.clearCount:
		g.Count = t.initial.Count
		t.gc.remaining.Store(int64(g.Count))
	case u.count != nil:
		g.Count = int32(*u.count)
		t.gc.remaining.Store(int64(g.Count))
	}
	switch {
	case u.clearLogFreq:
		g.LogFrequency = t.initial.LogFrequency
	case u.logFreq != nil:
		g.LogFrequency = uint32(*u.logFreq)
	}
}

func (t *Tracer) updateModel(model string, u update) error {
	o, ok := t.models[model]
	if !ok {
		if len(t.models) >= MaxModelSettings {
			return fmt.Errorf("trace settings are kept for at most %d models", MaxModelSettings)
		}
		o = &override{}
	}
	set := func(dst **int64, v *int64, clear bool) {
		switch {
		case clear:
			*dst = nil
		case v != nil:
			*dst = v
		}
	}
	set(&o.level, u.level, u.clearLevel)
	set(&o.rate, u.rate, u.clearRate)
	set(&o.count, u.count, u.clearCount)
	set(&o.logFreq, u.logFreq, u.clearLogFreq)
	switch {
	case o.rate == nil && o.count == nil:
		o.own = nil // the model shares the server's counters again
	case o.own == nil:
		o.own = &counters{}
		o.own.remaining.Store(int64(o.apply(t.global).Count))
	}
	if o.own != nil && (u.count != nil || u.clearCount) {
		o.own.remaining.Store(int64(o.apply(t.global).Count))
	}
	if o.level == nil && o.rate == nil && o.count == nil && o.logFreq == nil {
		delete(t.models, model)
		return nil
	}
	t.models[model] = o
	return nil
}

// apply is g with the model's own settings over it.
func (o *override) apply(g Settings) Settings {
	if o.level != nil {
		g.Level = Level(*o.level)
	}
	if o.rate != nil {
		g.Rate = uint32(*o.rate)
	}
	if o.count != nil {
		g.Count = int32(*o.count)
	}
	if o.logFreq != nil {
		g.LogFrequency = uint32(*o.logFreq)
	}
	return g
}

// publish makes the settings visible to sampling. Called with mu held (or before t is shared).
func (t *Tracer) publish() {
	sn := &snapshot{global: &scope{level: t.global.Level, rate: t.global.Rate, c: t.gc}}
	on := sn.global.level != 0
	if len(t.models) > 0 {
		sn.models = make(map[string]*scope, len(t.models))
		for name, o := range t.models {
			s := o.apply(t.global)
			c := t.gc
			if o.own != nil {
				c = o.own
			}
			sn.models[name] = &scope{level: s.Level, rate: s.Rate, c: c}
			on = on || s.Level != 0
		}
	}
	sn.on = on && t.tp != nil
	t.snap.Store(sn)
}
