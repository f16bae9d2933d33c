"""Child-side runner: ``python -m evaluators._child ENTRY REQUEST RESPONSE``.

Runs inside the sandbox. Imports the trusted entry function ``module:function``, calls it
with the request's payload and io directory, and writes its JSON-able return value (or the
error) to RESPONSE atomically. KeyboardInterrupt and SystemExit raised by candidate code
are reported as errors, never propagated.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    entry, request_path, response_path = argv
    request = json.loads(Path(request_path).read_text())
    module_name, _, func_name = entry.partition(":")
    sys.path.insert(0, os.getcwd())  # the candidate's folder
    result: dict
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        value = func(request["payload"], Path(request["io_dir"]))
        result = value if isinstance(value, dict) else {"value": value}
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything
        tb = traceback.format_exc(limit=20)
        result = {"error": f"{type(exc).__name__}: {exc}\n{tb[-3000:]}"}
    tmp = response_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh, default=float)
    os.replace(tmp, response_path)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip atexit handlers and non-daemon threads a candidate left behind
