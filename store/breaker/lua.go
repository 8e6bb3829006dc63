package breaker

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/redis/rueidis"
)

// The Redis layout: one hash per endpoint, <prefix>:breaker:{<endpoint>} (the hash tag puts each
// endpoint in its own Cluster slot; every script touches one key), with fields
//
//	st    state: 0 closed, 1 open, 2 half-open
//	gen   generation: max(gen+1, now) at every transition, so it grows even across a Redis
//	      restart or the key's expiry; a missing key reads as gen 0, closed (a replica that
//	      knew a later generation takes that as "Redis lost the state", see rentry.apply)
//	dl    deadline (ms): open -> may go half-open; half-open -> the round times out
//	cool  cooldown (429) until (ms)
//	cf    consecutive failures (closed)
//	pr    probes admitted in this half-open round; ps: their successes
//	eN tN fN  error-rate window bucket N (0-9): period index, outcomes, failures
//
// Times are Redis server TIME in ms, so replicas' clocks never matter. Every script returns
// {admit, st, gen, dl - now, cool - now} (admit: 0 refused, 1 admitted, 2 admitted as a probe)
// and, when state or cooldown changed, publishes "gen st dl-now cool-now endpoint" on the
// channel (message.go). Writes rewrite the whole (small) hash and refresh its TTL.
//
// ARGV common to all: channel, endpoint, ttl ms.
const luaPrelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, channel, endpoint, ttl = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local h = {}
local raw = redis.call('HGETALL', key)
for i = 1, #raw, 2 do h[raw[i]] = tonumber(raw[i + 1]) end
local fresh = h.gen == nil
local function get(f) return h[f] or 0 end
local dirty, publish = false, false
local function fmt(x) return string.format('%d', x) end
local function transition(to, openTimeout)
  h = {st = to, gen = math.max(get('gen') + 1, now), cool = h.cool}
  if to ~= 0 then h.dl = now + openTimeout end
  dirty, publish = true, true
end
local function cooldown(ms)
  if ms > 0 and now + ms > get('cool') then
    h.cool = now + ms
    dirty, publish = true, true
  end
end
local function left(f)
  local v = get(f) - now
  if v < 0 then return 0 end
  return v
end
local function finish(admit)
  if dirty then
    local flat = {}
    for k, v in pairs(h) do
      flat[#flat + 1] = k
      flat[#flat + 1] = fmt(v)
    end
    redis.call('DEL', key)
    redis.call('HSET', key, unpack(flat))
    redis.call('PEXPIRE', key, ttl)
  end
  local st, gen, dl, cool = get('st'), get('gen'), left('dl'), left('cool')
  if publish then
    redis.call('PUBLISH', channel, fmt(gen) .. ' ' .. st .. ' ' .. fmt(dl) .. ' ' .. fmt(cool) .. ' ' .. endpoint)
  end
  return {admit, st, gen, dl, cool}
end
`

// luaRecord adds a replica's batch of closed-state outcomes and trips the breaker when the rules
// say so (checked when the batch has a failure, as Local checks on each failure). ARGV 4..: gen the outcomes were counted in, successes, failures, failures since the
// batch's last success, "1" if the batch had a success, ConsecutiveFailures, ErrorRate,
// MinRequests, Window ms, OpenTimeout ms, cooldown ms (0: none).
var luaRecord = newScript(luaPrelude+`
local gen, succ, fail, trail, saw = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
local limit, rate, minReq = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local windowMs, openTimeout = tonumber(ARGV[12]), tonumber(ARGV[13])
cooldown(tonumber(ARGV[14]))
-- Counts of an older generation belong to a closed period that is over; a missing key is a
-- fresh closed period that takes any.
if get('st') == 0 and (fresh or get('gen') == gen) and succ + fail > 0 then
  local width = math.max(1, math.floor(windowMs / 10))
  local idx = math.floor(now / width)
  local slot = idx % 10
  if get('e' .. slot) ~= idx then
    h['e' .. slot], h['t' .. slot], h['f' .. slot] = idx, 0, 0
  end
  h['t' .. slot] = get('t' .. slot) + succ + fail
  h['f' .. slot] = get('f' .. slot) + fail
  if saw then h.cf = trail else h.cf = get('cf') + fail end
  local total, failures = 0, 0
  for i = 0, 9 do
    local e = get('e' .. i)
    if e > idx - 10 and e <= idx then
      total = total + get('t' .. i)
      failures = failures + get('f' .. i)
    end
  end
  dirty = true
  if fail > 0 and ((limit > 0 and h.cf >= limit) or (rate > 0 and total >= minReq and failures >= rate * total)) then
    transition(1, openTimeout)
  end
end
return finish(1)
`, false)

// luaAcquire asks to send a request while the breaker is not plainly closed: open -> half-open
// once the deadline passed, a new round when a half-open round timed out with all probes out,
// then admit (closed), admit a probe (half-open, fewer than HalfOpenProbes out), or refuse.
// ARGV 4..: HalfOpenProbes, OpenTimeout ms.
var luaAcquire = newScript(luaPrelude+`
local maxProbes, openTimeout = tonumber(ARGV[4]), tonumber(ARGV[5])
if get('st') == 1 and now >= get('dl') then
  transition(2, openTimeout)
elseif get('st') == 2 and now >= get('dl') and get('pr') >= maxProbes then
  transition(2, openTimeout)
end
if get('cool') > now then return finish(0) end
if get('st') == 0 then return finish(1) end
if get('st') == 2 and get('pr') < maxProbes then
  h.pr = get('pr') + 1
  dirty = true
  return finish(2)
end
return finish(0)
`, false)

// luaProbe reports a probe's outcome. ARGV 4..: the probe's gen, outcome (s success, f failure,
// r release the slot), SuccessesToClose, OpenTimeout ms, cooldown ms (0: none).
var luaProbe = newScript(luaPrelude+`
local gen, outcome, need, openTimeout = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
cooldown(tonumber(ARGV[8]))
if get('st') == 2 and get('gen') == gen then
  if outcome == 's' then
    h.ps = get('ps') + 1
    dirty = true
    if h.ps >= need then transition(0, 0) end
  elseif outcome == 'f' then
    transition(1, openTimeout)
  else
    h.pr = math.max(get('pr') - 1, 0)
    dirty = true
  end
end
return finish(0)
`, false)

// luaRead returns the state; it writes nothing.
var luaRead = newScript(luaPrelude+`
return finish(0)
`, true)

// script is a Lua script run with EVALSHA (falling back to EVAL on NOSCRIPT), one at a time or
// many in one pipeline. rueidis's own ExecMulti sends SCRIPT LOAD before every batch; flushes are
// frequent, so batches here go out as EVALSHA and only a NOSCRIPT answer costs a retry.
type script struct {
	lua *rueidis.Lua
	sha string
	ro  bool
}

func newScript(src string, readOnly bool) *script {
	sum := sha1.Sum([]byte(src))
	s := &script{sha: hex.EncodeToString(sum[:]), ro: readOnly}
	if readOnly {
		s.lua = rueidis.NewLuaScriptReadOnly(src)
	} else {
		s.lua = rueidis.NewLuaScript(src)
	}
	return s
}

// reply is a script's answer; times are ms from Redis's now.
type reply struct {
	admit  int64
	state  State
	gen    uint64
	dlMs   int64
	coolMs int64
}

func (s *script) exec(ctx context.Context, c rueidis.Client, key string, args []string) (reply, error) {
	return parseReply(s.lua.Exec(ctx, c, []string{key}, args))
}

// multi runs the script once per exec in one pipeline.
func (s *script) multi(ctx context.Context, c rueidis.Client, execs []rueidis.LuaExec) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(execs))
	for i, e := range execs {
		if s.ro {
			cmds[i] = c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
		} else {
			cmds[i] = c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
		}
	}
	res := c.DoMulti(ctx, cmds...)
	for i, r := range res {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			res[i] = s.lua.Exec(ctx, c, execs[i].Keys, execs[i].Args)
		}
	}
	return res
}

func parseReply(r rueidis.RedisResult) (reply, error) {
	vs, err := r.ToArray()
	if err != nil {
		return reply{}, err
	}
	if len(vs) != 5 {
		return reply{}, fmt.Errorf("breaker script returned %d values, want 5", len(vs))
	}
	var n [5]int64
	for i := range vs {
		if n[i], err = vs[i].AsInt64(); err != nil {
			return reply{}, fmt.Errorf("breaker script value %d: %w", i, err)
		}
	}
	if n[1] < 0 || n[1] > 2 || n[2] < 0 || n[3] < 0 || n[4] < 0 {
		return reply{}, fmt.Errorf("breaker script returned %v", n)
	}
	return reply{admit: n[0], state: State(n[1]), gen: uint64(n[2]), dlMs: min(n[3], maxLeft), coolMs: min(n[4], maxLeft)}, nil
}
