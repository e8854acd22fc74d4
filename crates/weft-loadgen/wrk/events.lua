-- wrk script for `weft serve` (issue #6 load benchmark): POST /v1/events, one structured-mode
-- CloudEvent per request, addressed round robin (`weftinstance`) to the instance ids given
-- after `--`. Token (optional) from env WEFT_TOKEN. Event numbers are unique across threads.
--   wrk -t2 -c64 -d20s --latency -s crates/weft-loadgen/wrk/events.lua http://127.0.0.1:18080 -- i1 i2 …
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  ids = args
  if #ids == 0 then
    error("give the instance ids after `--`")
  end
  counter = 0
  wrk.method = "POST"
  wrk.path = "/v1/events"
  wrk.headers["Content-Type"] = "application/cloudevents+json"
  local token = os.getenv("WEFT_TOKEN")
  if token and token ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. token
  end
end

function request()
  counter = counter + 1
  local n = tid * 1000000000 + counter
  local id = ids[(counter % #ids) + 1]
  local body = string.format(
    '{"specversion":"1.0","id":"wrk-%d","source":"wrk","type":"ping","weftinstance":"%s","data":{"n":%d}}',
    n, id, n)
  return wrk.format(nil, nil, nil, body)
end

function done(summary, latency, requests)
  io.write(string.format(
    "events: %d requests, %d non-2xx, %d socket errors; p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
    summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
