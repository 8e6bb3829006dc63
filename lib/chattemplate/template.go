package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ardanlabs/jinja"
)

// ContentFormat is how message contents reach the template, as vLLM names it: "string" (a
// content given as parts is their texts joined with "\n") or "openai" (a list of
// {"type": "text", "text": ...} parts, a plain string becoming one such part).
type ContentFormat string

const (
	FormatAuto   ContentFormat = ""
	FormatString ContentFormat = "string"
	FormatOpenAI ContentFormat = "openai"
)

// Options configure a template. The zero value works: no special tokens, vLLM's content format
// detected from the source, default limits, the wall clock.
type Options struct {
	// BOS and EOS are bos_token and eos_token in the template; empty leaves them undefined (as
	// transformers does for a tokenizer without one).
	BOS, EOS string
	// ContentFormat overrides the detected one (FormatAuto: the template iterates a message's
	// content, so it gets parts; otherwise strings).
	ContentFormat ContentFormat
	Limits        Limits
	// Now is strftime_now's clock (UTC is not imposed: the template sees Now's location, as
	// Python's strftime sees the server's); nil means time.Now.
	Now func() time.Time
}

// Limits bound a template and each render, so that neither a template nor a request can make a
// render run or grow without end. A zero field takes its default.
type Limits struct {
	// MaxTemplateBytes bounds the source given to Compile (default 1 MiB).
	MaxTemplateBytes int
	// MaxNesting bounds nested blocks and nested brackets in the source (default 64).
	MaxNesting int
	// MaxOutputBytes bounds the rendered text (default 16 MiB).
	MaxOutputBytes int
	// MaxLoopItems bounds the items of all for loops of one render together, each loop charged
	// its length as it starts (default 1,000,000).
	MaxLoopItems int
	// MaxMacroCalls bounds the macro calls of one render, recursion included (default 100,000).
	MaxMacroCalls int
	// MaxRange bounds the length of one range(...) (default 100,000).
	MaxRange int
	// MaxInputDepth bounds how deeply the request's JSON values (tools, tool-call arguments,
	// documents, chat_template_kwargs) nest (default 64).
	MaxInputDepth int
	// MaxDuration bounds one render's time, checked as each loop starts and each macro is
	// called (default 1 s; the context's deadline also applies).
	MaxDuration time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxTemplateBytes, 1<<20)
	def(&l.MaxNesting, 64)
	def(&l.MaxOutputBytes, 16<<20)
	def(&l.MaxLoopItems, 1_000_000)
	def(&l.MaxMacroCalls, 100_000)
	def(&l.MaxRange, 100_000)
	def(&l.MaxInputDepth, 64)
	if l.MaxDuration <= 0 {
		l.MaxDuration = time.Second
	}
	return l
}

// Template is a compiled chat template, safe for concurrent renders.
type Template struct {
	tmpl    *jinja.Template
	opts    Options
	limits  Limits
	format  ContentFormat
	globals map[string]jinja.Value // bos_token, eos_token: the same for every render
	// raise_exception and strftime_now: callables without per-render state, made once.
	raise, strftimeNow jinja.Value
	dicts              sync.Pool // of *dictSet
}

// Compile parses a chat template (tokenizer_config.json's chat_template) once, at start-up. A
// source that does not parse, or uses a filter or test the engine lacks, is a *SyntaxError; one
// over MaxTemplateBytes or MaxNesting a *LimitError.
func Compile(source string, opts Options) (t *Template, err error) {
	return compile(source, opts, true)
}

// compile is Compile; splitOutputs false leaves output tags whole (see splitConcat), for the
// tests that hold the split to the engine's own reading.
func compile(source string, opts Options, splitOutputs bool) (t *Template, err error) {
	lim := opts.Limits.withDefaults()
	pre, err := preprocess(source, &lim, splitOutputs)
	if err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			t, err = nil, &SyntaxError{Msg: fmt.Sprintf("the template engine failed on this source: %v", p)}
		}
	}()
	tmpl, err := jinja.Compile(pre.source)
	if err != nil {
		return nil, &SyntaxError{Msg: strings.TrimPrefix(strings.TrimPrefix(err.Error(), "jinja scan: "), "jinja parse: ")}
	}
	t = &Template{tmpl: tmpl, opts: opts, limits: lim, format: pre.contentFormat, globals: map[string]jinja.Value{}}
	t.raise = jinja.NewCallable("raise_exception", raiseException)
	t.strftimeNow = jinja.NewCallable("strftime_now", t.strftime)
	if opts.ContentFormat != FormatAuto {
		t.format = opts.ContentFormat
	}
	if opts.BOS != "" {
		t.globals["bos_token"] = jinja.NewString(opts.BOS)
	}
	if opts.EOS != "" {
		t.globals["eos_token"] = jinja.NewString(opts.EOS)
	}
	return t, nil
}

// ContentFormat is the content format this template's messages are given in.
func (t *Template) ContentFormat() ContentFormat { return t.format }

// Render renders the conversation in (see Input) as the model's prompt. Errors: *RaiseError (the
// template's raise_exception), *InputError (the request), *LimitError, *RenderError (any other
// failure of the engine, a recovered panic included; the context's end is one wrapping
// ctx.Err()). OpenAIError maps each to the gateway's answer.
func (t *Template) Render(ctx context.Context, in *Input) (string, error) {
	ds := t.getDicts()
	defer t.putDicts(ds)
	vars, err := t.variables(in, nil, ds)
	if err != nil {
		return "", err
	}
	return t.render(ctx, vars)
}

// renderVars is how many variables render adds to those of variables.
const renderVars = 6

// render runs the engine over prepared variables, with the per-render guards added.
func (t *Template) render(ctx context.Context, vars map[string]jinja.Value) (out string, err error) {
	st := &renderState{ctx: ctx, lim: &t.limits, deadline: time.Now().Add(t.limits.MaxDuration)}
	vars[iterFunc] = jinja.NewCallable(iterFunc, st.iter)
	vars[enterFunc] = jinja.NewCallable(enterFunc, st.enter)
	vars[tojsonFunc] = jinja.NewCallable(tojsonFunc, st.tojson)
	vars["range"] = jinja.NewCallable("range", st.rangeFunc)
	vars["raise_exception"] = t.raise
	vars["strftime_now"] = t.strftimeNow
	defer func() {
		if p := recover(); p != nil {
			out, err = "", &RenderError{Err: fmt.Errorf("the template engine failed: %v", p)}
		}
	}()
	out, err = t.tmpl.RenderValues(vars)
	if err != nil {
		return "", classify(err)
	}
	if len(out) > t.limits.MaxOutputBytes {
		return "", &LimitError{Limit: "MaxOutputBytes", Max: t.limits.MaxOutputBytes}
	}
	return out, nil
}

// classify returns the typed error inside an engine error, or wraps it.
func classify(err error) error {
	var (
		raise *RaiseError
		limit *LimitError
		input *InputError
		rend  *RenderError
	)
	switch {
	case errors.As(err, &raise):
		return raise
	case errors.As(err, &limit):
		return limit
	case errors.As(err, &input):
		return input
	case errors.As(err, &rend):
		return rend
	}
	return &RenderError{Err: err}
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), &RaiseError{Message: "the chat template refused the request"}
	}
	return jinja.Undefined(), &RaiseError{Message: printString(args[0])}
}

func printString(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

func (t *Template) strftime(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 || !args[0].IsString() {
		return jinja.Undefined(), errors.New("strftime_now: expected a format string")
	}
	now := time.Now
	if t.opts.Now != nil {
		now = t.opts.Now
	}
	return jinja.NewString(strftime(now(), args[0].AsString())), nil
}

// renderState is one render's budget.
type renderState struct {
	ctx        context.Context
	lim        *Limits
	deadline   time.Time
	loopItems  int
	macroCalls int
}

func (s *renderState) check() error {
	if err := s.ctx.Err(); err != nil {
		return &RenderError{Err: err}
	}
	if time.Now().After(s.deadline) {
		return &LimitError{Limit: "MaxDuration", Max: int(s.lim.MaxDuration / time.Millisecond)}
	}
	return nil
}

// iter charges a for loop's length before it starts and returns its iterable unchanged.
func (s *renderState) iter(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 { // for x in a, b: a tuple
		args = []jinja.Value{jinja.NewList(append([]jinja.Value(nil), args...))}
	}
	v := args[0]
	n := 0
	switch {
	case v.IsList():
		n = v.AsList().Len()
	case v.IsDict():
		n = v.AsDict().Len()
	case v.IsString():
		n = len(v.AsString())
	}
	s.loopItems += n + 1
	if s.loopItems > s.lim.MaxLoopItems {
		return jinja.Undefined(), &LimitError{Limit: "MaxLoopItems", Max: s.lim.MaxLoopItems}
	}
	if err := s.check(); err != nil {
		return jinja.Undefined(), err
	}
	return v, nil
}

// enter counts a macro call.
func (s *renderState) enter(_ []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	s.macroCalls++
	if s.macroCalls > s.lim.MaxMacroCalls {
		return jinja.Undefined(), &LimitError{Limit: "MaxMacroCalls", Max: s.lim.MaxMacroCalls}
	}
	if err := s.check(); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.None(), nil
}

func (s *renderState) tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: nothing to encode")
	}
	o, err := parseJSONOptions(args[1:], kwargs)
	if err != nil {
		return jinja.Undefined(), err
	}
	var b strings.Builder
	if err := writeJSON(&b, args[0], &o, 0); err != nil {
		return jinja.Undefined(), err
	}
	if b.Len() > s.lim.MaxOutputBytes {
		return jinja.Undefined(), &LimitError{Limit: "MaxOutputBytes", Max: s.lim.MaxOutputBytes}
	}
	return jinja.NewString(b.String()), nil
}

// rangeFunc is Python's range, bounded by MaxRange.
func (s *renderState) rangeFunc(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	ints := make([]int64, len(args))
	for i, a := range args {
		if !a.IsInt() {
			return jinja.Undefined(), fmt.Errorf("range: %s is not an integer", a.String())
		}
		ints[i] = a.AsInt()
	}
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1 to 3 arguments, got %d", len(ints))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	var n uint64 // unsigned: stop-start does not fit an int64 for every pair
	switch {
	case step > 0 && stop > start:
		n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && stop < start:
		n = (uint64(start)-uint64(stop)-1)/(uint64(-(step+1))+1) + 1
	}
	if n > uint64(s.lim.MaxRange) {
		return jinja.Undefined(), &LimitError{Limit: "MaxRange", Max: s.lim.MaxRange}
	}
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), nil
}
