"""The Lua scripts of the Redis session store (``redis.py`` says what each key holds).
Each runs atomically on the server, and each is idempotent for a client's retry."""

ACQUIRE = """
local held = redis.call('GET', KEYS[1])
if held then
  local token, nonce = string.match(held, '^(%d+):(.*)$')
  if nonce == ARGV[2] then return tonumber(token) end
  return 0
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[2], 'PX', ARGV[1])
return token
"""
"""KEYS lock, fence; ARGV ttl_ms, nonce → the new token, or 0 while another holds it.
A retried call (the reply was lost) finds its own nonce and gets its token back."""

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

RELEASE = """
local held = redis.call('GET', KEYS[1])
if not held then return 0 end
local token, nonce = string.match(held, '^(%d+):(.*)$')
if held == ARGV[1] or nonce == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
"""KEYS lock; ARGV the lock's value, or its nonce alone → 1 when it let the lock go. By
the nonce: a holder whose acquiring was cut off before its answer came (its token
unknown to it) can still let go of the lock it may have taken."""

APPEND = """
local token = tonumber(ARGV[1])
local written = tonumber(redis.call('GET', KEYS[3]) or '0')
if written == token then return 0 end
local held = redis.call('GET', KEYS[4])
if written > token or (held and held ~= ARGV[2]) then return -1 end
redis.call('RPUSH', KEYS[1], ARGV[3])
local total = redis.call('INCRBY', KEYS[2], string.len(ARGV[3]))
redis.call('SET', KEYS[3], token)
for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[5]}) do
  redis.call('PEXPIRE', key, ARGV[5])
end
local budget = tonumber(ARGV[4])
local dropped = 0
while budget > 0 and total > budget and redis.call('LLEN', KEYS[1]) > 1 do
  local oldest = redis.call('LPOP', KEYS[1])
  total = redis.call('DECRBY', KEYS[2], string.len(oldest))
  dropped = dropped + 1
end
return dropped + 1
"""
"""KEYS turns, bytes, written, lock, fence; ARGV token, lock value, turn, budget, ttl_ms →
1 + turns dropped; 0 when this token already wrote (a retry); -1 when fenced off. Every
key of the session then expires ``ttl_ms`` after this write (``sessions.ttl``)."""


FORGET = """
if redis.call('GET', KEYS[4]) ~= ARGV[2] then return -1 end
local had = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
return had
"""
"""KEYS turns, bytes, written, lock; ARGV token, lock value, ttl_ms → 1 deleted, 0 there
was nothing, -1 the lock is no longer this holder's. ``written`` takes the holder's token:
a holder from before the delete (its lock expired) stays fenced off, so it cannot write
a turn into the emptied session. A retry (the reply was lost) finds the session gone and
says 0."""
