package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// role is a message's role ("" when it has none or is not an object). Messages the gateway
// wrote, and most clients', start with it: those are read without decoding the rest.
func role(m json.RawMessage) string {
	const lead = `{"role":"`
	if rest, ok := bytes.CutPrefix(m, []byte(lead)); ok {
		if i := bytes.IndexAny(rest, `"\`); i >= 0 && rest[i] == '"' {
			return string(rest[:i])
		}
	}
	var v struct {
		Role string `json:"role"`
	}
	if json.Unmarshal(m, &v) != nil {
		return ""
	}
	return v.Role
}

func isSystem(r string) bool { return r == "system" || r == "developer" }

// conversation is a session's messages split into its parts.
type conversation struct {
	system []json.RawMessage // the leading system and developer messages
	turns  []turn
}

// turn is a user message and everything up to the next one.
type turn struct {
	all  []json.RawMessage
	keep []json.RawMessage // its system and developer messages, kept when the turn is dropped
}

// split reads msgs as a system prompt and turns. Messages before the first user message that
// are not system ones (an assistant's greeting) form a turn of their own.
func split(msgs []json.RawMessage) conversation {
	var c conversation
	i := 0
	for i < len(msgs) && isSystem(role(msgs[i])) {
		i++
	}
	c.system = msgs[:i:i]
	for ; i < len(msgs); i++ {
		r := role(msgs[i])
		if len(c.turns) == 0 || r == "user" {
			c.turns = append(c.turns, turn{})
		}
		t := &c.turns[len(c.turns)-1]
		t.all = append(t.all, msgs[i])
		if isSystem(r) {
			t.keep = append(t.keep, msgs[i])
		}
	}
	return c
}

// flatten is the conversation's messages with its first drop turns dropped (their system and
// developer messages kept, in place), then tail.
func (c conversation) flatten(drop int, tail []json.RawMessage) []json.RawMessage {
	n := len(c.system) + len(tail)
	for i, t := range c.turns {
		if i < drop {
			n += len(t.keep)
		} else {
			n += len(t.all)
		}
	}
	out := make([]json.RawMessage, 0, n)
	out = append(out, c.system...)
	for i, t := range c.turns {
		if i < drop {
			out = append(out, t.keep...)
		} else {
			out = append(out, t.all...)
		}
	}
	return append(out, tail...)
}

// TokenCounter counts the tokens of a conversation's prompt: exactly with the model's tokenizer
// and chat template, or EstimateTokens.
type TokenCounter func(ctx context.Context, messages []json.RawMessage) (int, error)

// EstimateTokens is the conservative count used when a model has no tokenizer: one token per 3
// bytes of each message's JSON (keys, quotes and escapes included), rounded up, plus 8 per
// message for the chat template's role markers.
//
// It errs high on the text that fills conversations: byte-level BPE vocabularies of current
// models (Llama 3, Qwen 2, GPT-4o) average about 4 bytes per token on English prose and code,
// and the JSON syntax counted here is more than the markers a template puts around each
// message. So a window trimmed with it leaves the model room rather than overflowing. It can
// err low on text with rare scripts, emoji or random bytes, which take up to one token per
// byte; then the context-length stage, which counts exactly, refuses the request instead.
func EstimateTokens(_ context.Context, messages []json.RawMessage) (int, error) {
	n := 0
	for _, m := range messages {
		n += (len(m)+2)/3 + 8
	}
	return n, nil
}

// trimWindow returns the number of c's oldest turns to drop so the prompt of c then tail fits
// window tokens with reserve left for the completion, and the tokens dropped. It drops none
// when everything fits, or when nothing would (tail alone is too long: the context-length stage
// refuses it). It asks count O(log turns) times: once for the whole, once for the least that
// can be sent, and a binary search between (a prompt's count grows with its messages).
func trimWindow(ctx context.Context, c conversation, tail []json.RawMessage, window, reserve int, count TokenCounter) (drop, dropped int, err error) {
	fits := func(n int) bool { return n+reserve <= window }
	full, err := count(ctx, c.flatten(0, tail))
	if err != nil {
		return 0, 0, fmt.Errorf("sessions: count the prompt's tokens: %w", err)
	}
	if fits(full) || len(c.turns) == 0 {
		return 0, 0, nil
	}
	least, err := count(ctx, c.flatten(len(c.turns), tail))
	if err != nil {
		return 0, 0, fmt.Errorf("sessions: count the prompt's tokens: %w", err)
	}
	if !fits(least) {
		return 0, 0, nil
	}
	// Invariant: dropping lo turns does not fit, dropping hi does (with hiN tokens).
	lo, hi, hiN := 0, len(c.turns), least
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		n, err := count(ctx, c.flatten(mid, tail))
		if err != nil {
			return 0, 0, fmt.Errorf("sessions: count the prompt's tokens: %w", err)
		}
		if fits(n) {
			hi, hiN = mid, n
		} else {
			lo = mid
		}
	}
	return hi, max(full-hiN, 0), nil
}

// bound drops the oldest turns of msgs (keeping their system and developer messages) until
// they hold at most maxBytes bytes and maxMessages messages. When even the newest turn does
// not fit with the system messages, no turn is kept; when the system messages alone do not
// fit, nothing is. It never splits a message.
func bound(msgs []json.RawMessage, maxBytes, maxMessages int) (kept []json.RawMessage, trimmed bool) {
	size := 0
	for _, m := range msgs {
		size += len(m)
	}
	if size <= maxBytes && len(msgs) <= maxMessages {
		return msgs, false
	}
	c := split(msgs)
	count := len(msgs)
	for drop := 1; drop <= len(c.turns); drop++ {
		t := c.turns[drop-1]
		count -= len(t.all) - len(t.keep)
		for _, m := range t.all {
			size -= len(m)
		}
		for _, m := range t.keep {
			size += len(m)
		}
		if size <= maxBytes && count <= maxMessages {
			return c.flatten(drop, nil), true
		}
	}
	return nil, true
}
