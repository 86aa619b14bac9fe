package redis

import goredis "github.com/redis/go-redis/v9"

// Each script returns {won, value, pttl, counter}: won 1 if it changed the
// lease; value the lease key's value afterwards (nil when free); pttl its
// remaining milliseconds (-2 when absent, -1 when it has no expiry); counter
// the last token issued (nil if none). KEYS are always {lease, counter}.

var acquireScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
	return {0, cur, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
end
local token = redis.call('INCR', KEYS[2])
local value = token .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return {1, value, tonumber(ARGV[2]), tostring(token)}
`)

var renewScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	redis.call('PUBLISH', ARGV[3], ARGV[4])
	return {1, cur, tonumber(ARGV[2]), redis.call('GET', KEYS[2])}
end
return {0, cur, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
`)

var releaseScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[2], ARGV[3])
	return {1, false, -2, redis.call('GET', KEYS[2])}
end
return {0, cur, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
`)

var getScript = goredis.NewScript(`
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
`)
