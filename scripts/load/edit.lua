-- wrk script: POST the request file given as the first argument; with "edited" as the
-- second (and a run number as the third), rewrite the definition's EDIT-000000000 marker with a counter so every call
-- carries a definition the server has not seen (a cache miss, as after a user's edit).
local prefix, suffix
local counter = 0

init = function(args)
  local file = assert(io.open(args[1], "rb"))
  local body = file:read("*a")
  file:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.body = body
  if args[2] == "edited" then
    -- The parent's copy, not the observed ConfigMap's: an edit changes the APIMock, and
    -- the ConfigMap still holds the old definition until the answer is applied.
    local parent = assert(body:find('"parent":', 1, true), "the request has no parent")
    local first, last = body:find("EDIT%-000000000", parent)
    assert(first, "the parent's definition has no EDIT-000000000 marker")
    prefix = body:sub(1, first - 1)
    suffix = body:sub(last + 1)
    -- Each run starts its counter at its own offset (third argument) so a later run
    -- against the same server never replays an earlier run's definitions.
    counter = (tonumber(args[3]) or 0) * 100000000
  end
end

request = function()
  if prefix == nil then
    return wrk.request()
  end
  counter = counter + 1
  return wrk.format(nil, nil, nil, prefix .. string.format("EDIT-%09d", counter) .. suffix)
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout))
end
