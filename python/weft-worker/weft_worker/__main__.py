"""``python -m weft_worker``: print a module's tool declarations, or serve its tools.

    python -m weft_worker describe MODULE [--url URL]
    python -m weft_worker serve MODULE [--url URL] [--tenant TENANT] [--register WEFT_URL] [--token TOKEN]

MODULE is an importable module name (``my_tools``, ``pkg.tools``) or a path to a ``.py`` file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import types

from . import DEFAULT_URL, RegistrationError, Worker, describe, tools_of


def load(module: str) -> types.ModuleType:
    """Imports ``module``: a dotted name, or a path to a Python file."""
    if module.endswith(".py") or os.sep in module:
        path = os.path.abspath(module)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"weft_worker: cannot load {module}")
        sys.path.insert(0, os.path.dirname(path))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    sys.path.insert(0, os.getcwd())
    return importlib.import_module(module)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m weft_worker", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("describe", help="print the [[tools.declared]] TOML of MODULE's tools")
    d.add_argument("module")
    d.add_argument("--url", default=DEFAULT_URL, help=f"NATS server weft calls (default {DEFAULT_URL})")
    s = sub.add_parser("serve", help="serve MODULE's tools until SIGTERM/SIGINT")
    s.add_argument("module")
    s.add_argument("--url", default=os.environ.get("NATS_URL", DEFAULT_URL))
    s.add_argument("--tenant", default="local")
    s.add_argument(
        "--register",
        default=os.environ.get("WEFT_URL"),
        help="declare the tools to this running weft (PUT /v1/tools/{name}) once served",
    )
    s.add_argument("--token", default=os.environ.get("WEFT_TOKEN"), help="weft API token (the tenant's)")
    a = p.parse_args(argv)
    mod = load(a.module)
    tools = tools_of(mod)
    if not tools:
        print(f"weft_worker: {a.module} defines no @tool functions", file=sys.stderr)
        return 2
    if a.cmd == "describe":
        sys.stdout.write(f"# The tools of {a.module} (python -m weft_worker describe); paste into weft.toml.\n")
        sys.stdout.write(describe(tools, a.url))
        return 0
    try:
        Worker(a.url, a.tenant, tools, register=a.register, token=a.token).serve()
    except RegistrationError as e:
        print(f"weft_worker: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
