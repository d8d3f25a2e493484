"""The checks that make a wrong Ray cluster address fail fast."""

from __future__ import annotations

import socket

import pytest

from llm_assets.compute.ray_cluster import RayClusterError, probe_cluster_address


def test_with_ray_tls_only_the_connection_is_checked(monkeypatch):
    """A TLS cluster answers the cleartext HTTP/2 preface with nothing: with RAY_USE_TLS the
    check stops at the connection (a refused one still fails at once), as Ray's TLS client then
    handshakes itself: such a cluster is not refused as "not a Ray cluster"."""
    monkeypatch.setenv("RAY_USE_TLS", "1")
    with socket.socket() as silent:  # listens, never speaks: what the probe sees of TLS
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        probe_cluster_address(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=1.0)
        port = silent.getsockname()[1]
    with pytest.raises(RayClusterError, match="no Ray cluster answers"):
        probe_cluster_address(f"127.0.0.1:{port}", timeout_s=1.0)
    for value in (None, "yes", " 1"):  # Ray's TLS is off for these: so is the shortcut
        if value is None:
            monkeypatch.delenv("RAY_USE_TLS")
        else:
            monkeypatch.setenv("RAY_USE_TLS", value)
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen()
            with pytest.raises(RayClusterError, match=r"no Ray cluster answers.*timed out"):
                probe_cluster_address(f"127.0.0.1:{silent.getsockname()[1]}", timeout_s=1.0)
