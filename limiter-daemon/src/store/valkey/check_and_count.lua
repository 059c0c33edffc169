-- One decision in one call: the caller's lockout, then (if none is active) one atomic
-- check-and-count of every window of one identity, the same semantics as store::count::apply.
-- All keys share one hash tag, so they live in one cluster slot.
-- KEYS: 1 burst hash (slot -> count), 2 hourly, 3 key hourly, 4 daily (window index in the name),
--       5 (optional) the caller's lockout (JSON with until_ms)
-- ARGV: now_ms, cost, burst, hourly, key_hourly, daily (0 = not applied), daily_enforce (1/0)
-- Reply: {2, lockout JSON} when locked (nothing counted), else
--        {admitted 1/0, refusal flags, burst used, burst reset ms, hourly, key hourly, daily}
local now = tonumber(ARGV[1])
if KEYS[5] then
  local body = redis.call('GET', KEYS[5])
  if body then
    -- Active by the caller's clock, not the key's TTL: the caller's clock is the one in force.
    local ok, l = pcall(cjson.decode, body)
    if ok and type(l) == 'table' and tonumber(l.until_ms) and now < tonumber(l.until_ms) then
      return {2, body}
    end
  end
end
local cost = tonumber(ARGV[2])
local bl = tonumber(ARGV[3])
local hl = tonumber(ARGV[4])
local kl = tonumber(ARGV[5])
local dl = tonumber(ARGV[6])
local de = ARGV[7] == '1'
local slot = math.floor(now / 5000)
local lo = slot - 12
local bused = 0
local oldest = -1
if bl > 0 then
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local s = tonumber(flat[i])
    local c = tonumber(flat[i + 1])
    if s < lo then
      redis.call('HDEL', KEYS[1], flat[i])
    elseif s <= slot then
      bused = bused + c
      if oldest < 0 or s < oldest then oldest = s end
    end
  end
end
local function get(k)
  local v = redis.call('GET', k)
  if v then return tonumber(v) end
  return 0
end
local hused = 0
local kused = 0
local dused = 0
if hl > 0 then hused = get(KEYS[2]) end
if kl > 0 then kused = get(KEYS[3]) end
if dl > 0 then dused = get(KEYS[4]) end
local rb = bl > 0 and bused >= bl
local rh = hl > 0 and hused + cost > hl
local rk = kl > 0 and kused + cost > kl
local rd = dl > 0 and de and dused + cost > dl
local admitted = not (rb or rh or rk or rd)
-- Expiry is relative to the caller's clock, so the window maths follow the caller, not ours.
local hour_left = (math.floor(now / 3600000) + 1) * 3600000 - now
local day_left = (math.floor(now / 86400000) + 1) * 86400000 - now
if admitted then
  if bl > 0 then
    redis.call('HINCRBY', KEYS[1], string.format('%d', slot), 1)
    redis.call('PEXPIRE', KEYS[1], 70000)
    bused = bused + 1
    if oldest < 0 then oldest = slot end
  end
  if hl > 0 then
    hused = redis.call('INCRBY', KEYS[2], cost)
    redis.call('PEXPIRE', KEYS[2], string.format('%d', hour_left + 60000))
  end
  if kl > 0 then
    kused = redis.call('INCRBY', KEYS[3], cost)
    redis.call('PEXPIRE', KEYS[3], string.format('%d', hour_left + 60000))
  end
  if dl > 0 then
    dused = redis.call('INCRBY', KEYS[4], cost)
    redis.call('PEXPIRE', KEYS[4], string.format('%d', day_left + 60000))
  end
end
local breset = 60000
if oldest >= 0 then breset = math.max((oldest + 13) * 5000 - now, 1) end
local flags = 0
if rb then flags = flags + 1 end
if rh then flags = flags + 2 end
if rk then flags = flags + 4 end
if rd then flags = flags + 8 end
local a = 0
if admitted then a = 1 end
return {a, flags, bused, string.format('%d', breset), hused, kused, dused}
