"""Network exposure: what the embedded cluster listens on, and a TLS cluster refusing
clients without its certificate (docs/reliability.md)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psutil
import pytest
from distributed import Client, LocalCluster
from distributed.security import Security
from sklearn.datasets import make_classification

import dmlsearch.runner.cluster as cluster_module
from dmlsearch import SearchCV
from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.runner import start_local_cluster
from dmlsearch.testing import SleepyClassifier

pytestmark = pytest.mark.cluster

Endpoint = tuple[str, int]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return make_classification(n_samples=40, n_features=4, random_state=0)


def _endpoint(address: str) -> Endpoint:
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    assert parts.hostname is not None and parts.port is not None, address
    return parts.hostname, parts.port


def _listening_sockets() -> dict[Endpoint, int]:
    """(ip, port) -> pid of every TCP socket listening in this process and its descendants."""
    me = psutil.Process()
    found = {}
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:  # ended meanwhile
            continue
        found.update(
            {(c.laddr.ip, c.laddr.port): proc.pid for c in conns if c.status == psutil.CONN_LISTEN}
        )
    return found


def _roles(cluster: LocalCluster) -> dict[Endpoint, str]:
    """Every endpoint the cluster says it serves, named by role."""
    roles = {_endpoint(cluster.scheduler_address): "scheduler"}
    if cluster.dashboard_link:
        roles[_endpoint(cluster.dashboard_link)] = "scheduler dashboard"
    workers = dict(cluster.scheduler_info.get("workers", {}))
    for address, info in workers.items():
        host, port = _endpoint(address)
        roles[(host, port)] = "worker"
        if info.get("nanny"):
            roles[_endpoint(info["nanny"])] = "nanny"
        dashboard = info.get("services", {}).get("dashboard")
        if dashboard:
            roles[(host, int(dashboard))] = "worker dashboard"
    return roles


def test_every_socket_of_the_embedded_cluster_listens_on_loopback(
    data: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = data
    clusters: list[LocalCluster] = []

    def recording_start(*args: Any, **kwargs: Any) -> LocalCluster:
        clusters.append(start_local_cluster(*args, **kwargs))
        return clusters[-1]

    # The embedded default starts its cluster through this name: record it, change nothing.
    monkeypatch.setattr(cluster_module, "start_local_cluster", recording_start)
    before = set(_listening_sockets())  # other tests' clusters in this process
    seen: dict[Endpoint, int] = {}
    roles: dict[Endpoint, str] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            if clusters:
                roles.update(_roles(clusters[0]))
            seen.update(_listening_sockets())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        search = SearchCV(
            SleepyClassifier(seconds=0.1),
            {"parameter": [float(i) for i in range(10)]},
            strategy="grid",
            cv=2,
            progress=False,
            refit=False,
        )
        search.fit(X, y)  # client=None: the embedded default cluster
    finally:
        stop.set()
        watcher.join()
    assert len(clusters) == 1
    kinds = sorted(set(roles.values()))
    assert kinds == ["nanny", "scheduler", "scheduler dashboard", "worker", "worker dashboard"]
    for endpoint, role in roles.items():
        assert endpoint[0] == "127.0.0.1", f"the {role} serves {endpoint}"
        assert endpoint in seen, f"the {role} at {endpoint} was never seen listening"
    new = {ep: pid for ep, pid in seen.items() if ep not in before}
    exposed = {ep: pid for ep, pid in new.items() if ep[0] != "127.0.0.1"}
    assert not exposed, f"listening beyond 127.0.0.1 (endpoint: pid): {exposed}"
    # Nothing listens that the cluster does not account for (a stray debug port, say).
    assert set(new) <= set(roles), {ep: new[ep] for ep in set(new) - set(roles)}


# -- TLS ---------------------------------------------------------------------------------------


def _certificate(folder: Path, name: str) -> tuple[str, str]:
    """A self-signed certificate and its key (PEM text), made with the openssl command.

    ``Security.temporary()`` would need the ``cryptography`` package, which dmlsearch does
    not depend on.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make test certificates")
    folder.mkdir()
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"),
            "-subj", f"/CN={name}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return (folder / "cert.pem").read_text(), (folder / "key.pem").read_text()


def _security(cert: str, key: str) -> Security:
    """Every role (client, scheduler, worker) with this certificate, trusting only it."""
    roles = {f"tls_{role}_{part}": value for role in ("client", "scheduler", "worker")
             for part, value in (("cert", cert), ("key", key))}  # fmt: skip
    return Security(require_encryption=True, tls_ca_file=cert, **roles)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Security]]:
    base = tmp_path_factory.mktemp("tls")
    security = _security(*_certificate(base / "cluster", "dask-internal"))
    cluster = start_local_cluster(1, security=security)
    yield cluster, security
    cluster.close()


def test_a_search_runs_through_a_client_with_the_certificate(
    tls: tuple[LocalCluster, Security], data: Any
) -> None:
    cluster, security = tls
    X, y = data
    assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
    with Client(cluster, security=security, set_as_default=False) as client:
        search = SearchCV(
            SleepyClassifier(seconds=0.01),
            {"parameter": [0.0, 1.0, 2.0]},
            strategy="grid",
            cv=2,
            client=client,
            progress=False,
        )
        search.fit(X, y)
    assert {t.state for t in search.trials_} == {"complete"}
    assert search.predict(X).shape == (len(X),)


def test_a_client_with_another_certificate_is_refused(
    tls: tuple[LocalCluster, Security], tmp_path: Path
) -> None:
    cluster, _ = tls
    intruder = _security(*_certificate(tmp_path / "intruder", "intruder"))
    with pytest.raises(OSError, match="certificate"):
        Client(cluster.scheduler_address, security=intruder, timeout="5s", set_as_default=False)


def test_a_plain_tcp_client_is_refused(tls: tuple[LocalCluster, Security]) -> None:
    cluster, _ = tls
    plain = cluster.scheduler_address.replace("tls://", "tcp://")
    with pytest.raises(OSError):
        Client(plain, timeout="5s", set_as_default=False)


def test_a_tls_address_without_security_is_a_clear_error(
    tls: tuple[LocalCluster, Security], data: Any
) -> None:
    cluster, _ = tls
    search = SearchCV(
        SleepyClassifier(), {"parameter": [0.0]}, client=cluster.scheduler_address, progress=False
    )
    with pytest.raises(InvalidParameterError, match="security") as info:
        search.fit(*data)
    assert info.value.param == "client"


def _server(reply: bytes | None) -> tuple[str, Any]:
    """A TCP port on 127.0.0.1 that accepts and then says nothing, or ``reply``."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[Any] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}", server


@pytest.mark.parametrize(
    ("reply", "what"), [(None, "no answer"), (b"\xff" * 64 + b"HTTP/1.1 200 OK\r\n\r\n", "")]
)
def test_an_address_that_is_not_a_scheduler_is_refused_within_the_timeout(
    monkeypatch: pytest.MonkeyPatch, reply: bytes | None, what: str
) -> None:
    # A port that accepts but never answers (a dashboard's) hung fit forever.
    import time

    monkeypatch.setattr(cluster_module, "CONNECT_TIMEOUT", 1.0)
    address, server = _server(reply)
    try:
        start = time.monotonic()
        with pytest.raises(InvalidParameterError, match="did not answer as a Dask scheduler") as e:
            SearchCV(
                SleepyClassifier(), {"seconds": [0.0]}, client=address, progress=False, cv=2
            ).fit(*make_classification(20, 4, random_state=0))
        assert e.value.param == "client" and what in str(e.value)
        assert time.monotonic() - start < 6
    finally:
        server.close()


def test_closed_and_asynchronous_clients_are_refused_in_one_line() -> None:
    import asyncio

    X, y = make_classification(20, 4, random_state=0)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as lc:
        closed = Client(lc, set_as_default=False)
        closed.close()
        with pytest.raises(InvalidParameterError, match="the Client is closed"):
            SearchCV(SleepyClassifier(), {"seconds": [0.0]}, client=closed, cv=2).fit(X, y)

        async def in_a_loop() -> None:
            async with Client(lc.scheduler_address, asynchronous=True) as client:
                search = SearchCV(SleepyClassifier(), {"seconds": [0.0]}, client=client, cv=2)
                with pytest.raises(InvalidParameterError, match="asynchronous Client"):
                    search.fit(X, y)

        asyncio.run(in_a_loop())
