-- The shared retry budget: one atomic step.
-- KEYS[1]  the reserve (an integer number of credits)
-- ARGV[1]  max        the reserve's cap
-- ARGV[2]  cost       credits spent by one retry
-- ARGV[3]  need       smallest reserve that allows a retry
-- ARGV[4]  earned     credits earned by originals since the last call
-- ARGV[5]  refund     credits of unused reservations given back
-- ARGV[6]  want       retries asked for
-- ARGV[7]  initial    the reserve when the key does not exist
-- ARGV[8]  ttl_ms     > 0: the key expires after this idle time; 0: never; < 0: read only
-- Returns {granted, reserve}.
local max = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local need = tonumber(ARGV[3])
local add = tonumber(ARGV[4]) + tonumber(ARGV[5])
local want = tonumber(ARGV[6])
local ttl = tonumber(ARGV[8])
local v = redis.call('GET', KEYS[1])
local c = tonumber(ARGV[7])
if v then
  c = tonumber(v)
end
if ttl < 0 then
  return {0, c}
end
c = math.min(max, c + add)
local granted = 0
while granted < want and c >= need do
  c = c - cost
  granted = granted + 1
end
if ttl > 0 then
  redis.call('SET', KEYS[1], c, 'PX', ttl)
else
  redis.call('SET', KEYS[1], c)
end
return {granted, c}
