"""Connect to an existing Ray cluster, and the checks that make a wrong or stopped one fail fast.

Ray itself waits minutes for an address where no cluster answers, retries a refused token for
~20 s, and notices a stopped cluster only after 60 s of reconnecting; each check here names the
address and what to do instead. On a cluster, every node must have this package installed and
see the warehouse path (a shared filesystem) or have credentials for its bucket (a warehouse in
object storage); see docs/backends.md.
"""

from __future__ import annotations

import os

from llm_assets.compute.ray_local import WORKER_ENV


class RayClusterError(ConnectionError):
    """The Ray cluster named by ``ray_address`` is not there, is not a Ray cluster, or cannot
    run a task."""


PROBE_TIMEOUT_S = 5.0
"""How long the address check waits to connect and for the server's first HTTP/2 frame."""
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HTTP2_SETTINGS = 0x4


def probe_cluster_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast, naming the address, unless a gRPC server (a Ray GCS or Ray Client server)
    answers at ``address`` (``host:port`` or ``ray://host:port``; ``auto`` and other forms are
    left to Ray). Ray itself waits ~14 minutes for a port where nothing listens, and as long for
    one where another server does (an HTTP server, a database): a typo in ``ray_address`` hung
    the run. The check connects and sends the HTTP/2 client preface; a gRPC server answers with
    a SETTINGS frame, anything else with something else or nothing. With Ray's TLS on
    (``RAY_USE_TLS``) the server speaks TLS first, so only the connection is checked."""
    import socket

    target = address.removeprefix("ray://")
    host, sep, port_text = target.rpartition(":")
    if not sep or not port_text.isdigit() or not host:
        return  # "auto", "local", a bare host: Ray resolves those itself, quickly
    host = host.strip("[]")
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")  # Ray's own rule
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s) as sock:
            if tls:
                return
            sock.settimeout(timeout_s)
            sock.sendall(_HTTP2_PREFACE + bytes([0, 0, 0, _HTTP2_SETTINGS, 0, 0, 0, 0, 0]))
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        raise RayClusterError(
            f"no Ray cluster answers at ray_address {address!r}: {exc.strerror or exc}; start one "
            "(ray start --head) or correct the address (the head's GCS port, 6379 by default)"
        ) from exc
    if len(head) < 9 or head[3] != _HTTP2_SETTINGS:
        raise RayClusterError(
            f"ray_address {address!r} is not a Ray cluster: the server there does not speak "
            f"gRPC (it answered {head[:40]!r}); give the head's GCS address (port 6379 by "
            "default) or a Ray Client address (ray://host:10001)"
        )


def _auth_message(address: str) -> str:
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return (
            f"the Ray cluster at {address} refused this run's authentication token: the token "
            "this process has (RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else "
            "~/.ray/auth_token) is missing or is not the cluster's; give it the token of the "
            "cluster's head node (`ray get-auth-token` there prints it)"
        )
    return (
        f"the Ray cluster at {address} requires token authentication: set RAY_AUTH_MODE=token "
        "in the run's environment, with the cluster's token in ~/.ray/auth_token, the file "
        "RAY_AUTH_TOKEN_PATH names, or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node "
        "prints it; `ray start` turns token authentication on when the head has a token, e.g. "
        "~/.ray/auth_token, unless RAY_AUTH_MODE=disabled)"
    )


def _is_auth_error(exc: BaseException) -> bool:
    """Whether Ray's connection error comes from a refused token (Ray formats the
    ``AuthenticationError`` into a RuntimeError's text, so the class is not always there)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "AuthenticationError" or any(
            marker in str(current) for marker in ("InvalidAuthToken", "AuthenticationError")
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def check_cluster_authentication(address: str) -> None:
    """Fail at once, saying what to set, if the GCS at ``address`` (``host:port``) refuses this
    process's authentication. ``ray.init`` would retry for ~20 s, logging a warning a second,
    then raise a bare ``ConnectionError``. One GCS client call (~10 ms); any other error is left
    to ``ray.init``, and so are ``ray://`` addresses."""
    host, sep, port_text = address.rpartition(":")
    if address.startswith("ray://") or not sep or not host or not port_text.isdigit():
        return
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except AuthenticationError as exc:
        raise RayClusterError(_auth_message(address)) from exc
    except Exception:
        return


def connect_to_cluster(address: str) -> int:
    """Connect this process to the Ray cluster at ``address``; return its CPUs.

    The address and the authentication are checked first (:func:`probe_cluster_address`,
    :func:`check_cluster_authentication`); a cluster without CPUs is refused (and left)."""
    import ray

    probe_cluster_address(address)
    check_cluster_authentication(address)
    try:
        ray.init(address=address, runtime_env={"env_vars": WORKER_ENV}, logging_level="WARNING")
    except ConnectionError as exc:
        if _is_auth_error(exc):
            raise RayClusterError(_auth_message(address)) from exc
        raise
    cpus = ray.cluster_resources().get("CPU", 0)
    if cpus < 1:
        resources = ray.cluster_resources()
        ray.shutdown()
        raise RayClusterError(
            f"the Ray cluster at {address} has {cpus:g} CPUs (resources: "
            f"{resources}): no shard task could ever be scheduled; give its nodes CPUs "
            "(ray start --num-cpus N) or leave ray_address empty for a local Ray"
        )
    return int(cpus)


def check_cluster_answers(address: str) -> None:
    """Raise :class:`RayClusterError` unless the cluster at ``address`` still answers
    (:func:`probe_cluster_address`: a connect and one gRPC frame, ~1 ms)."""
    try:
        probe_cluster_address(address)
    except RayClusterError as exc:
        reason = exc.__cause__ or exc
        raise RayClusterError(
            f"the Ray cluster at {address} stopped answering "
            f"({getattr(reason, 'strerror', None) or reason}); shards already finished are "
            "kept: start the cluster again and rerun"
        ) from exc
