"""Keep a one-machine Ray cluster on 127.0.0.1 (the project's rule: servers bind loopback only).

Ray 2.60 binds its servers to loopback only when the node's IP is exactly ``127.0.0.1`` (gcs_server, raylet,
core workers: ``listen_to_localhost_only = node_ip_address == "127.0.0.1"``; the runtime-env agent and the client
server likewise), yet ``ray start`` and ``ray.init`` rewrite ``127.0.0.1`` and ``localhost`` into the machine's
routable IP (``ray/_private/services.py: resolve_ip_for_localhost``, called by ``ray/scripts/scripts.py`` for
``--node-ip-address`` and, via ``canonicalize_bootstrap_address``, for ``--address``). Seen here: with
``--node-ip-address 127.0.0.1`` every node registered as 192.0.2.2, gcs_server and the raylets listened on all
interfaces and the client server on 192.0.2.2:10001.
"""

from __future__ import annotations


def keep_loopback(host: str) -> str:
    """``resolve_ip_for_localhost`` that leaves a loopback address as it is."""
    return host


def loopback(ray_params, head: bool) -> None:
    """A ``RAY_START_HOOK`` for ``ray start``: the node's IP, and the head address it joins, stay 127.0.0.1."""
    from ray._private import services

    services.resolve_ip_for_localhost = keep_loopback
    ray_params.node_ip_address = ray_params.node_name = "127.0.0.1"
