-- One lockout written from any host, atomically with its strikes, the longer lockout winning
-- (a host that was degraded writes its lockouts late; one made meanwhile elsewhere may be
-- longer). Both keys carry the address's hash tag: one cluster slot.
-- KEYS: 1 the lockout (JSON, until_ms), 2 the strike record (JSON, strikes)
-- ARGV: lockout JSON, its until_ms, its TTL ms, strike JSON ('' = none), its TTL ms
-- Reply: {1 written / 0 kept, the lockout JSON now in force}
local function field(body, name)
  local ok, v = pcall(cjson.decode, body)
  if ok and type(v) == 'table' then return tonumber(v[name]) end
  return nil
end
local cur = redis.call('GET', KEYS[1])
local won = true
if cur then
  local until_ms = field(cur, 'until_ms')
  if until_ms and until_ms >= tonumber(ARGV[2]) then won = false end
end
if won then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  cur = ARGV[1]
end
if ARGV[4] ~= '' then
  local old = redis.call('GET', KEYS[2])
  local keep = false
  if old and not won then
    local had = field(old, 'strikes')
    keep = had ~= nil and had >= (field(ARGV[4], 'strikes') or 0)
  end
  if not keep then redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5]) end
end
local w = 0
if won then w = 1 end
return {w, cur}
