"""The workers' allocator setting while dmlsearch's tasks run (runner/_malloc.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import dask
import pytest
from distributed import Client

from dmlsearch.runner import _malloc
from dmlsearch.runner._malloc import CONFIG_KEY, call_tuned, malloc_tuned
from dmlsearch.runner._task import execute


def _is_glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (AttributeError, ValueError, OSError):
        return False


GLIBC = _is_glibc()


def page_faults(blocks: int = 50) -> int:
    """Minor page faults of allocating and freeing ``blocks`` 3 MiB arrays, one at a time."""
    import resource

    import numpy as np

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(blocks):
        a = np.ones(384 * 1024)  # below numpy's 4 MiB huge-page advice
        del a
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt: Linux with glibc only")
def test_a_task_reuses_large_blocks_in_a_dask_worker_and_the_worker_is_restored_after(
    client: Client,
) -> None:
    # Dask's nanny freezes glibc's mmap threshold at 128 KiB: each 3 MiB block is a fresh
    # mmap, 768 page faults. Under the setting the freed block is reused.
    worker = next(iter(client.scheduler_info()["workers"]))
    env = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"), workers=[worker])
    assert env[worker] is not None, "the premise: Dask's workers start with the variable"

    def on(fn: Any, *args: Any) -> Any:
        return client.submit(fn, *args, workers=[worker], pure=False).result()

    plain = on(page_faults)
    tuned = on(call_tuned, page_faults)
    through_runner = on(execute, lambda: [page_faults()], None)[0]
    after = on(page_faults)
    assert plain > 50 * 500  # about 768 a block
    assert tuned * 5 < plain and through_runner * 5 < plain
    assert after > 50 * 500, "the threshold goes back once the task ends"


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def mallopt(self, option: int, value: int) -> int:
        self.calls.append(("mallopt", option, value))
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad, 0))
        return 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLibc]:
    libc = FakeLibc()
    monkeypatch.setattr(_malloc, "_checked", True)
    monkeypatch.setattr(_malloc, "_libc", libc)
    monkeypatch.setattr(_malloc, "_trim_restore", 65536)
    yield libc


def test_nested_and_repeated_blocks_raise_once_and_restore_both_thresholds(
    fake: FakeLibc,
) -> None:
    with malloc_tuned():
        with malloc_tuned():
            pass
        assert fake.calls == [
            ("mallopt", _malloc.M_MMAP_THRESHOLD, 32 * 1024 * 1024),
            ("mallopt", _malloc.M_TRIM_THRESHOLD, 64 * 1024 * 1024),
        ]
    assert fake.calls[2:] == [
        ("mallopt", _malloc.M_MMAP_THRESHOLD, 128 * 1024),
        ("mallopt", _malloc.M_TRIM_THRESHOLD, 65536),
        ("malloc_trim", 0, 0),
    ]


def test_a_failing_task_still_restores_the_thresholds(fake: FakeLibc) -> None:
    def boom() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        call_tuned(boom)
    assert fake.calls[-1] == ("malloc_trim", 0, 0)
    assert _malloc._depth == 0


def test_dask_config_turns_it_off(fake: FakeLibc) -> None:
    with dask.config.set({CONFIG_KEY: False}), malloc_tuned():
        pass
    assert fake.calls == []


@pytest.mark.parametrize(
    ("env", "applies"),
    [
        ({"MALLOC_TRIM_THRESHOLD_": "65536"}, True),  # as Dask's nanny starts workers
        ({}, False),  # glibc's dynamic threshold is on: it adapts by itself
        ({"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "1"}, False),
        ({"MALLOC_TRIM_THRESHOLD_": "1", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, False),
    ],
)
def test_only_where_a_variable_froze_the_threshold_and_the_user_set_none(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], applies: bool
) -> None:
    for name in (*_malloc._FREEZING, "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_malloc, "_checked", False)
    monkeypatch.setattr(_malloc, "_libc", None)
    monkeypatch.setattr(_malloc, "_trim_restore", _malloc.FLOOR)
    found = _malloc._glibc()
    assert (found is not None) == (applies and GLIBC)
    if found is not None:
        assert _malloc._trim_restore == int(env["MALLOC_TRIM_THRESHOLD_"])
