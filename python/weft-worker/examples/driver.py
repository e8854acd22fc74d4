"""A seed-000 driver as a weft tool: `python -m weft_worker describe examples/driver.py`
prints its [[tools.declared]] entry for weft.toml; `python examples/driver.py` serves it."""
from weft_worker import Worker, tool

@tool(effect="write", idempotent=True)
def post_teams(channel: str, text: str, idempotency_key: str = "") -> dict:
    """Post a message to a Teams channel (here: print it)."""
    print(f"[{channel}] {text} (key {idempotency_key})", flush=True)
    return {"posted": True}

if __name__ == "__main__":
    Worker("nats://127.0.0.1:4222", tenant="local").serve()
