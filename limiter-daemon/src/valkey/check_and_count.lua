-- One atomic check-and-count of every window of one identity, the same semantics as
-- store::count::apply. All keys share one hash tag, so they live in one cluster slot. (Lockouts
-- are not read here: each host answers them from its replica of the lockout stream.)
-- The windows are the rows of the window table (model/window.rs), in its order; n of them.
-- KEYS: 1..n one per window: a sliding window's hash (5 s slot -> count), a fixed window's
--       counter; n+1 the identity's first-seen key (`:ts`, ISO 8601)
-- ARGV: now_ms, cost, now as ISO 8601 (UTC), dated (the window, 1-based, whose key carries no
--       index and starts over when `:ts` names another UTC day: the daily count; 0 = none),
--       want (a lease: admit up to this many requests at once, store::lease::grant; 1 = one
--       decision), refill (1: a lease topped up off the request path; refused, it counts
--       nothing, for no request arrived), then 6 per window: limit (0 = not applied), refuses (1/0: 0 counts but never refuses),
--       per request (1: counts 1; 0: counts cost), span ms, sliding (1/0), counts refused (1:
--       counts every request that arrives, admitted or not; the burst)
-- Reply: {admitted 1/0, refusal flags (window i: bit i-1), then per window: used, reset ms,
--        then g, the requests granted (0 refused; 1..want admitted, each window counting g
--        requests' worth, so valkey-cli shows granted units)}
local now = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local iso = ARGV[3]
local dated = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local refill = ARGV[6] == '1'
local n = (#ARGV - 6) / 6
local ts_key = KEYS[n + 1]
-- The day the first-seen key names: nil when absent, then today is assumed.
local ts = nil
local stale = false
local slot_ms = 5000
local slot = math.floor(now / slot_ms)
local w = {}
for i = 1, n do
  local a = 6 + (i - 1) * 6
  local add = cost
  if ARGV[a + 3] == '1' then add = 1 end
  w[i] = {
    limit = tonumber(ARGV[a + 1]),
    refuses = ARGV[a + 2] == '1',
    add = add,
    span = tonumber(ARGV[a + 4]),
    sliding = ARGV[a + 5] == '1',
    always = ARGV[a + 6] == '1',
    used = 0,
    oldest = -1,
  }
end
for i = 1, n do
  local x = w[i]
  if x.limit > 0 then
    if x.sliding then
      local lo = slot - x.span / slot_ms
      local flat = redis.call('HGETALL', KEYS[i])
      for j = 1, #flat, 2 do
        local s = tonumber(flat[j])
        local c = tonumber(flat[j + 1])
        if s < lo then
          redis.call('HDEL', KEYS[i], flat[j])
        elseif s <= slot then
          x.used = x.used + c
          if x.oldest < 0 or s < x.oldest then x.oldest = s end
        end
      end
    else
      local v = redis.call('GET', KEYS[i])
      if v then x.used = tonumber(v) end
      if i == dated then
        ts = redis.call('GET', ts_key)
        -- Yesterday's count, not yet expired (its TTL runs past the day end): start over.
        if ts and string.sub(ts, 1, 10) ~= string.sub(iso, 1, 10) then
          stale = true
          x.used = 0
        end
      end
    end
  end
end
local admitted = true
local flags = 0
local bit = 1
-- g: the requests every refusing window still allows, at most `want`.
local g = want
for i = 1, n do
  local x = w[i]
  if x.limit > 0 and x.refuses then
    if x.used + x.add > x.limit then
      admitted = false
      flags = flags + bit
    end
    local room = math.floor((x.limit - x.used) / x.add)
    if room < g then g = room end
  end
  bit = bit * 2
end
if not admitted then g = 0 end
if refill and not admitted then
  -- No request arrived: nothing counts, not even the burst.
  for i = 1, n do w[i].limit = 0 end
end
for i = 1, n do
  if admitted then w[i].add = w[i].add * g end
end
-- Expiry is relative to the caller's clock, so the window maths follow the caller, not ours.
local function rollover(span)
  return (math.floor(now / span) + 1) * span - now
end
for i = 1, n do
  local x = w[i]
  if x.limit > 0 and (admitted or x.always) then
    if x.sliding then
      local field = string.format('%d', slot)
      local held = redis.call('HINCRBY', KEYS[i], field, x.add)
      -- A slot holds at most 65535, as the embedded store's u16 slots do: refused requests
      -- count here too, so a flood can reach it.
      local over = math.max(held - 65535, 0)
      if over > 0 then redis.call('HSET', KEYS[i], field, 65535) end
      redis.call('PEXPIRE', KEYS[i], string.format('%d', x.span + 10000))
      x.used = x.used + x.add - over
      if x.oldest < 0 then x.oldest = slot end
    else
      local ttl = string.format('%d', rollover(x.span) + 60000)
      if i == dated and stale then
        redis.call('SET', KEYS[i], x.add, 'PX', ttl)
        x.used = x.add
      else
        x.used = redis.call('INCRBY', KEYS[i], x.add)
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      if i == dated and (stale or not ts) then
        -- First count of the day: when this identity was first seen, with the count's TTL.
        redis.call('SET', ts_key, iso, 'PX', ttl)
      end
    end
  end
end
local a = 0
if admitted then a = 1 end
local reply = {a, flags}
for i = 1, n do
  local x = w[i]
  local reset = rollover(x.span)
  if x.sliding then
    reset = x.span
    if x.oldest >= 0 then reset = math.max((x.oldest + x.span / slot_ms + 1) * slot_ms - now, 1) end
  end
  reply[2 * i + 1] = x.used
  reply[2 * i + 2] = string.format('%d', reset)
end
reply[2 * n + 3] = g
return reply
