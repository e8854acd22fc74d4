-- wrk script for `weft serve` (issue #6 load benchmark): GET /v1/instances/{id}, round robin
-- over the instance ids given after `--`. Token (optional) from env WEFT_TOKEN.
--   wrk -t2 -c64 -d20s --latency -s crates/weft-loadgen/wrk/state.lua http://127.0.0.1:18080 -- i1 i2 …
function init(args)
  ids = args
  if #ids == 0 then
    error("give the instance ids after `--`")
  end
  counter = 0
  local token = os.getenv("WEFT_TOKEN")
  if token and token ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. token
  end
end

function request()
  counter = counter + 1
  return wrk.format("GET", "/v1/instances/" .. ids[(counter % #ids) + 1])
end
