"""One resolution per child process, for the drift resolver scripts (each runs as a file
under its engine's own Python, so this sits beside them, not in specc)."""

import json
import os


def resolve_in_fork(server_id: str, resolve) -> dict:
    """``resolve()`` -> (parsed, resolved, error) in a forked child: a resolution writes
    process state (env, caches), and one command must not see another's."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            parsed, resolved, error = resolve()
        except BaseException as e:   # noqa: BLE001
            parsed, resolved, error = {}, None, f"{type(e).__name__}: {e}"[:600]
        with os.fdopen(write, "w") as f:
            json.dump({"id": server_id, "parsed": parsed, "resolved": resolved,
                       "error": error}, f)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text) if text else {"id": server_id, "parsed": {}, "resolved": None,
                                          "error": "resolver died"}
