-- Gives back units a request counted in one holder's budgets when another holder (the caller
-- or one of its networks, counted apart in their own cluster slots) refused the request: the
-- same end state as store::count::apply_all, which never counts a refused request's units.
-- KEYS: the holder's fixed-window counters that counted; ARGV: the units each counted.
-- A counter that has expired meanwhile is left absent (no negative count, no key without TTL).
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local v = redis.call('DECRBY', KEYS[i], ARGV[i])
    if v < 0 then redis.call('INCRBY', KEYS[i], -v) end
  end
end
return 1
