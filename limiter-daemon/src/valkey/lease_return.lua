-- Gives back what a lease of one holder granted and this host did not spend (store::lease):
-- the lease expired, the host stops, or another holder of the request granted less. Units go
-- back into the very counters the grant counted them in, and only while those still count
-- the grant's window: the burst's 5 s slot (its hash field), the hour's key (its index is in
-- the name), the day's count only while `:ts` still names the grant's day. Nothing is
-- carried to another slot or window, and no counter goes below zero or is created.
-- KEYS: the burst hash, the hourly counter, the daily count, the key-hourly counter, `:ts`
-- ARGV: the burst slot (field), burst units, hourly units, daily units, key-hourly units,
--       the grant's UTC day (YYYY-MM-DD)
local function back(key, n)
  if n > 0 and redis.call('EXISTS', key) == 1 then
    local v = redis.call('DECRBY', key, n)
    if v < 0 then redis.call('INCRBY', key, -v) end
  end
end
local b = tonumber(ARGV[2])
if b > 0 and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local v = redis.call('HINCRBY', KEYS[1], ARGV[1], -b)
  if v < 0 then redis.call('HINCRBY', KEYS[1], ARGV[1], -v) end
end
back(KEYS[2], tonumber(ARGV[3]))
local ts = redis.call('GET', KEYS[5])
if ts and string.sub(ts, 1, 10) == ARGV[6] then back(KEYS[3], tonumber(ARGV[4])) end
back(KEYS[4], tonumber(ARGV[5]))
return 1
