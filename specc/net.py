"""Addresses: where a client connects to reach a server that binds `host`."""

from __future__ import annotations

#: Bind addresses that mean "this machine" to a client on the same machine.
_LOCAL_BINDS = {"localhost", "0.0.0.0", "::", "", "*"}


def connect_host(host: str) -> str:
    """The address to connect to for a server bound to `host` (a wildcard or `localhost`
    bind is reached on the loopback address, which is never proxied)."""
    return "127.0.0.1" if host in _LOCAL_BINDS else host


def base_url(host: str, port: int) -> str:
    h = connect_host(host)
    return f"http://[{h}]:{port}" if ":" in h else f"http://{h}:{port}"
