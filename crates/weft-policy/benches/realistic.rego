# A realistic weft policy bundle, the fixture of issue #25's benchmark (benches/decide.rs,
# examples/policy_latency.rs): 20 `deny` rules and 3 `require_approval` rules over the tenant,
# the tool and its effect class, the host of an HTTP call, the attempt and the budget, with a
# per-tenant configuration object inside the bundle.
package weft

# Per-tenant configuration (what an operator would ship as the bundle's data).
tenants := {
	"acme": {
		"tools": {"http.request", "send_email", "search", "sql.query", "llm.complete", "payments.charge"},
		"hosts": {"api.acme.com", "acme.com", "api.github.com", "api.stripe.com"},
		"email_domain": "acme.com",
		"max_effect": "write",
		"max_attempts": 5,
		"approve_writes": false,
		"approval_over_cents": 50000,
	},
	"globex": {
		"tools": {"http.request", "search", "llm.complete"},
		"hosts": {"globex.com"},
		"email_domain": "globex.com",
		"max_effect": "read",
		"max_attempts": 3,
		"approve_writes": true,
		"approval_over_cents": 0,
	},
	"initech": {
		"tools": {"search"},
		"hosts": set(),
		"email_domain": "initech.com",
		"max_effect": "pure",
		"suspended": true,
	},
}

# Tools nobody may call, whatever the tenant says.
blocked_tools := {"shell.exec", "fs.delete", "k8s.apply"}

# Hosts no call may reach (cloud metadata, loopback).
blocked_hosts := {"169.254.169.254", "metadata.google.internal", "localhost", "127.0.0.1", "0.0.0.0"}

effect_rank := {"pure": 0, "read": 1, "write": 2}

# Estimated cost of a call, in cents, for the budget rule.
tool_cost_cents := {"llm.complete": 2, "payments.charge": 30, "sql.query": 1}

approval_timeout_ms := 600000

tenant := tenants[input.tenant]

http_call if startswith(input.tool.name, "http.")

# `https://user@host:8443/path?q` -> authority `user@host:8443`.
authority := split(input.args.url, "/")[2] if http_call

host := lower(split(split(authority, "@")[count(split(authority, "@")) - 1], ":")[0])

host_allowed if tenant.hosts[host]

host_allowed if {
	some allowed in tenant.hosts
	endswith(host, concat("", [".", allowed]))
}

# --- the input document itself ---

deny contains "unsupported input version" if input.version != 1

deny contains "not a tool call" if input.kind != "tool_call"

# --- tenant ---

deny contains msg if {
	not tenant
	msg := sprintf("unknown tenant \"%s\"", [input.tenant])
}

deny contains msg if {
	tenant.suspended
	msg := sprintf("tenant %s is suspended", [input.tenant])
}

# --- tool ---

deny contains msg if {
	input.tool.name in blocked_tools
	msg := sprintf("tool %s is blocked", [input.tool.name])
}

deny contains msg if {
	tenant
	not input.tool.name in tenant.tools
	msg := sprintf("tenant %s may not call %s", [input.tenant, input.tool.name])
}

# --- effect class ---

deny contains msg if {
	not input.tool.effect in object.keys(effect_rank)
	msg := sprintf("unknown effect class \"%s\"", [input.tool.effect])
}

deny contains msg if {
	effect_rank[input.tool.effect] > effect_rank[tenant.max_effect]
	msg := sprintf("tenant %s may not %s (at most %s)", [input.tenant, input.tool.effect, tenant.max_effect])
}

deny contains "a non-idempotent write is not retried" if {
	input.tool.effect == "write"
	not input.tool.idempotent
	input.attempt > 1
}

# --- host of an HTTP call ---

deny contains "an HTTP call needs args.url" if {
	http_call
	not is_string(input.args.url)
}

deny contains msg if {
	http_call
	not startswith(input.args.url, "https://")
	msg := sprintf("only https is allowed: %s", [input.args.url])
}

deny contains "no credentials in URLs" if {
	http_call
	contains(authority, "@")
}

deny contains msg if {
	host in blocked_hosts
	msg := sprintf("host %s is blocked", [host])
}

deny contains msg if {
	regex.match(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`, host)
	msg := sprintf("IP literal %s: name the host", [host])
}

deny contains msg if {
	host
	not host_allowed
	msg := sprintf("tenant %s may not reach %s", [input.tenant, host])
}

deny contains msg if {
	input.tool.name == "http.request"
	method := upper(object.get(input.args, "method", "GET"))
	method in {"POST", "PUT", "PATCH", "DELETE"}
	input.tool.effect != "write"
	msg := sprintf("%s declared %s but sends %s", [input.tool.name, input.tool.effect, method])
}

# --- arguments of other tools ---

deny contains msg if {
	input.tool.name == "send_email"
	not endswith(lower(input.args.to), concat("", ["@", tenant.email_domain]))
	msg := sprintf("email to %s leaves %s", [input.args.to, tenant.email_domain])
}

deny contains "destructive SQL" if {
	input.tool.name == "sql.query"
	regex.match(`(?i)\b(drop|truncate|alter)\b`, input.args.query)
}

# --- attempts and budget ---

deny contains msg if {
	limit := object.get(tenant, "max_attempts", 3)
	input.attempt > limit
	msg := sprintf("attempt %d exceeds %d", [input.attempt, limit])
}

deny contains "tool-call budget exhausted" if {
	object.get(input, ["budget", "tool_calls"], 1) <= 0
}

deny contains msg if {
	cost := object.get(tool_cost_cents, input.tool.name, 0)
	left := object.get(input, ["budget", "cost_cents"], cost)
	cost > left
	msg := sprintf("%s costs %d cents, %d left", [input.tool.name, cost, left])
}

# --- calls a person approves first ---

require_approval contains msg if {
	tenant.approve_writes
	input.tool.effect == "write"
	msg := sprintf("%s writes for tenant %s", [input.tool.name, input.tenant])
}

require_approval contains msg if {
	input.tool.name == "payments.charge"
	input.args.amount_cents > tenant.approval_over_cents
	msg := sprintf("charge of %d cents", [input.args.amount_cents])
}

require_approval contains msg if {
	input.tool.name == "http.request"
	upper(object.get(input.args, "method", "GET")) == "DELETE"
	msg := sprintf("DELETE %s", [input.args.url])
}
