"""Where work runs: the embedded LocalCluster, a user's cluster, and its shape."""

from __future__ import annotations

import contextvars
import logging
import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
import distributed.nanny
import distributed.process
from distributed import Client, LocalCluster, Nanny
from distributed.comm import parse_address
from distributed.comm.registry import get_backend

from ..exceptions import DmlsearchError, InvalidParameterError, NoWorkersError, SchedulerLostError
from ._main_guard import check_main_guard

__all__ = [
    "WarmNanny",
    "cluster_shape",
    "embedded_cluster",
    "resolve_client",
    "scheduler_loss",
    "start_local_cluster",
]

logger = logging.getLogger("dmlsearch")


#: Imported once by the fork server our nannies start worker processes from, so that a
#: worker that replaces a dead one is ready in a fraction of a second, not after seconds
#: of imports (docs/reliability.md).
WARM_MODULES = (
    "distributed",
    "numpy",
    "scipy",
    "sklearn.base",
    "sklearn.model_selection",
    "sklearn.metrics",
    "dmlsearch._evaluate",
)

_warm_start: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "dmlsearch_warm_start", default=False
)
# A distributed that no longer has this hook gets Dask's own start (WarmNanny is then a
# plain Nanny) rather than a dmlsearch that fails to import.
_original_mp_context: Any = getattr(distributed.nanny, "get_mp_context", None)


def _mp_context() -> Any:
    """Dask's multiprocessing context, or the warm fork server inside a :class:`WarmNanny`."""
    assert _original_mp_context is not None
    if not _warm_start.get() or "forkserver" not in multiprocessing.get_all_start_methods():
        return _original_mp_context()
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(WARM_MODULES))  # no effect once the server runs
    return ctx


class WarmNanny(Nanny):
    """A nanny whose worker processes (the first and every restart) fork from a warm server.

    Dask starts each worker process with ``spawn``: a fresh interpreter that imports
    distributed, then scikit-learn and dmlsearch on its first task, seconds on a busy
    machine, during which the cluster runs a worker short. This nanny starts them from
    multiprocessing's fork server with :data:`WARM_MODULES` imported once. Only the
    nannies of :func:`start_local_cluster` do this; other clusters are untouched.
    """

    async def instantiate(self) -> Any:
        # The worker process is started from a task this coroutine creates, which copies
        # the context: only this nanny's start sees the flag.
        token = _warm_start.set(True)
        try:
            return await super().instantiate()
        finally:
            _warm_start.reset(token)


# Both modules look the function up by name when a worker process starts: the nanny for
# its queues, AsyncProcess for the process itself.
if _original_mp_context is not None and hasattr(distributed.process, "get_mp_context"):
    distributed.nanny.get_mp_context = _mp_context
    distributed.process.get_mp_context = _mp_context


def start_local_cluster(
    n_workers: int | None = None, threads_per_worker: int = 1, **cluster_kwargs: Any
) -> LocalCluster:
    """Worker processes on 127.0.0.1, a dashboard on a free port, the worker profiler off.

    The profiler samples every thread every 10 ms and costs about a third of the
    throughput of tiny trials (docs/benchmarks.md); the servers time their event loops
    every 200 ms rather than 20 (see the setting below). A task that kills two workers is
    given up (``allowed-failures: 1``). Data broadcast to every worker stays there (the
    Active Memory Manager is off). Worker processes fork from a warm server
    (:class:`WarmNanny`), so a lost worker is replaced in a fraction of a second. The
    embedded default, the CLI's local cluster, the tests and the benchmarks all start their
    clusters here. ``cluster_kwargs`` (``memory_limit``, say;
    ``worker_class=distributed.Nanny`` for Dask's own nanny) go to
    :class:`distributed.LocalCluster` and override these defaults.
    """
    kwargs: dict[str, Any] = {
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": "127.0.0.1:0",
        "silence_logs": logging.ERROR,
        # No heartbeat traceback on the terminal when the cluster closes (the module says why).
        "preload": ["dmlsearch.runner._worker_logging"],
        **cluster_kwargs,
    }
    if kwargs["processes"] and "worker_class" not in kwargs:
        kwargs["worker_class"] = WarmNanny
    settings = {
        "distributed.worker.profile.enabled": False,
        # A task that kills the worker running it is given up after two deaths (Dask's
        # default waits for four); each death risks a nanny that fails to restart.
        "distributed.scheduler.allowed-failures": 1,
        # The data a run broadcasts to every worker must stay on every worker: the Active
        # Memory Manager drops such copies within seconds, so a killed worker then takes
        # the only copy and the run must send it again (docs/reliability.md).
        "distributed.scheduler.active-memory-manager.start": False,
        # Every event loop (scheduler, workers) wakes every 20 ms by default only to time
        # itself (Dask's "unresponsive event loop" log and a dashboard metric): half an
        # idle cluster's CPU, taken from the ranks of a gang job, which all wait for the
        # one preempted (docs/benchmarks.md). Its warning still fires after 3 s.
        "distributed.admin.tick.interval": "200ms",
    }
    with dask.config.set(settings):
        try:
            return LocalCluster(
                n_workers=n_workers, threads_per_worker=threads_per_worker, **kwargs
            )
        except RuntimeError as exc:
            # distributed's own message ("WarmNanny failed to start.") names no cause; the
            # worker's traceback, printed above it, does.
            raise DmlsearchError(
                f"the local cluster's worker processes failed to start ({exc}); the error "
                "a worker printed above says why"
            ) from exc


@contextmanager
def embedded_cluster(n_workers: int | None = None) -> Iterator[Client]:
    """A :func:`start_local_cluster` with a client, both closed on exit."""
    check_main_guard()
    cluster = start_local_cluster(n_workers)
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def _wake() -> None:
    """The task that waits for a cluster's first worker (it does nothing)."""


def wait_for_a_worker(client: Client, timeout: float, what: str) -> None:
    """Wait up to ``timeout`` seconds for the cluster's first worker; NoWorkersError then.

    One task waits meanwhile: an adaptive cluster (``cluster.adapt(minimum=0)``,
    dask-jobqueue's) asks for workers when tasks wait, never for data or for a client that
    waits, so without it a search or a gang on such a cluster never got a worker.
    """
    waiting = client.submit(_wake, pure=False)
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise NoWorkersError(
            f"the cluster had no worker for {timeout:.0f} s (dmlsearch.no-workers-timeout), "
            f"so {what} could not start; start workers, or connect to a cluster that has them"
        ) from None
    finally:
        waiting.cancel()


def cluster_shape(client: Client) -> dict[str, Any]:
    """Where a search runs: scheduler address, workers, threads and memory (for the registry)."""
    shape: dict[str, Any] = {"address": getattr(client.scheduler, "address", None)}
    from .gang import alive_workers

    try:
        workers = alive_workers(client, running=False)
    except Exception as exc:  # an informational record must never fail a search
        logger.warning("could not read the cluster's shape: %s", exc)
        return shape
    shape.update(
        workers=len(workers),
        threads=sum(int(w.get("nthreads", 0)) for w in workers.values()),
        memory_bytes=sum(int(w.get("memory_limit") or 0) for w in workers.values()),
        dashboard=getattr(client, "dashboard_link", None),
    )
    return shape


#: Seconds a scheduler address has to connect and answer who it is.
CONNECT_TIMEOUT = 10.0


async def _identity(address: str, timeout: float) -> Any:
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def check_is_scheduler(address: str, timeout: float | None = None) -> None:
    """InvalidParameterError unless a Dask scheduler answers at ``address`` in ``timeout``.

    distributed's Client waits for the scheduler's handshake without a deadline: a port
    that accepts but never answers (the dashboard's 8787 for the scheduler's 8786, another
    service) hung ``fit`` forever, and one that answered with other bytes failed deep in
    deserialization. An address that cannot be reached raises OSError (for
    :func:`_connect`). Plain tcp:// only: other schemes need the cluster's own settings.
    """
    import asyncio
    import socket
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm.addressing import parse_host_port

    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    scheme, location = parse_address(address)
    if scheme != "tcp":
        return
    host, port = parse_host_port(location, 8786)
    with socket.create_connection((host, port), timeout=timeout):
        pass  # reachable: what answers there is checked next

    def ask() -> Any:  # in a thread of its own: the caller may be inside an event loop
        return asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))

    with ThreadPoolExecutor(1) as pool:
        try:
            reply = pool.submit(ask).result()
        except Exception as exc:  # a timeout, or bytes that are not Dask's protocol
            reply = exc
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        what = "no answer" if isinstance(reply, TimeoutError) else type(reply).__name__
        raise InvalidParameterError(
            "client",
            f"{address!r} accepted a connection but did not answer as a Dask scheduler "
            f"within {timeout:g} s ({what}): is it the scheduler's port (8786 by default) "
            "rather than its dashboard's (8787) or another service's?",
        )


def _connect(address: str) -> Client:
    """A client on the scheduler at ``address``; InvalidParameterError if it cannot be one."""
    try:
        # Checked before a Client exists: one that fails on its scheme leaves a half-made
        # client whose close blocks the interpreter's exit for 20 s.
        get_backend(parse_address(address)[0])
        check_is_scheduler(address)
        return Client(address, set_as_default=False, timeout=f"{CONNECT_TIMEOUT:g}s")
    except InvalidParameterError:
        raise
    except OSError as exc:  # unreachable, refused, or a TLS certificate it does not accept
        raise InvalidParameterError(
            "client", f"cannot reach a Dask scheduler at {address!r}: {exc}"
        ) from exc
    except (TypeError, ValueError) as exc:
        # distributed's own errors for an address it cannot use: a tls:// address with no
        # TLS configured raises TypeError, an unknown scheme ValueError.
        hint = ""
        if address.startswith("tls://"):
            hint = (
                "; a tls:// scheduler needs the cluster's certificates: pass "
                "client=distributed.Client(address, security=distributed.security.Security(...)) "
                "or set distributed.comm.tls in Dask's configuration"
            )
        raise InvalidParameterError(
            "client", f"cannot connect to a Dask scheduler at {address!r}: {exc}{hint}"
        ) from exc


def _lost_scheduler(
    client: Client, address: str | None, exc: BaseException
) -> SchedulerLostError | None:
    """The error to raise for ``exc`` if it means the scheduler is gone, else None."""
    from distributed.client import ClosedClientError

    # A CommClosedError while the client still runs is a worker's or a task's business.
    status = str(getattr(client, "status", "running"))
    if not isinstance(exc, ClosedClientError) and status == "running":
        return None
    # A closed client's own message ("Can't send cancel-keys message") is noise.
    detail = "" if isinstance(exc, ClosedClientError) else f"; {_one_line(exc)}"
    return SchedulerLostError(
        f"lost the Dask scheduler at {address or '(unknown address)'} during the run (the "
        f"client is {status}{detail}). What was recorded before stays recorded: start a new "
        "cluster and resume it to finish (`dmlsearch resume FILE`; in Python resume=True, "
        "with the same registry and experiment_name)"
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no message'}"


@contextmanager
def scheduler_loss(client: Client) -> Iterator[None]:
    """Turn the errors of a scheduler that died mid-run into one SchedulerLostError.

    Without it the run ends with distributed's ``ClosedClientError`` or ``CommClosedError``
    raised from wherever the loop was (cancelling futures, gathering a result), chained to
    several others. The client closes itself once it fails to reconnect within its
    ``timeout`` (10 s for a scheduler address given to dmlsearch, else
    ``distributed.comm.timeouts.connect``): that is how long a run takes to end.
    """
    address = getattr(client.scheduler, "address", None)  # gone once the client closes
    try:
        yield
    except Exception as exc:
        lost = _lost_scheduler(client, address, exc)
        if lost is None:
            raise
        logger.debug("the scheduler was lost", exc_info=exc)
        raise lost from None


@contextmanager
def resolve_client(client: Any) -> Iterator[Client]:
    """The client a search runs on, resolved once at the edge.

    ``client`` may be a :class:`distributed.Client`, a scheduler address, or ``None``: then
    the current default client is used if there is one, else an embedded LocalCluster is
    started and closed afterwards.
    """
    if isinstance(client, Client):
        _check_usable(client)
        yield client
        return
    if isinstance(client, str):
        c = _connect(client)
        try:
            yield c
        finally:
            c.close()
        return
    if client is not None:
        raise InvalidParameterError(
            "client",
            f"expected a distributed.Client, a scheduler address or None, got {type(client).__name__}",
        )
    try:
        # Honours `with client.as_current():` as well as the global default client.
        found = Client.current()
    except ValueError:
        found = None
    if found is not None and found.status == "running":
        _check_usable(found)
        yield found
        return
    with embedded_cluster() as c:
        yield c


def _check_usable(client: Client) -> None:
    """InvalidParameterError for a client that a search cannot use: closed, or asynchronous."""
    if getattr(client, "asynchronous", False):
        raise InvalidParameterError(
            "client",
            "an asynchronous Client (asynchronous=True, or the current client inside "
            "`async def`) is not supported: pass a synchronous distributed.Client, or run "
            "the search in a thread (await loop.run_in_executor(None, search.fit, X, y))",
        )
    if client.status != "running":
        raise InvalidParameterError(
            "client",
            f"the Client is {client.status}: pass a running distributed.Client (or None "
            "for the current one or an embedded cluster)",
        )
