"""A process SIGKILLed in the middle of ``Registry.register_model`` (docs/reliability.md).

The registering process is this file run as a script: it registers version 1, then arms a
hook at one point of the second registration that writes a marker file and blocks; the
test kills it there. Another process then opens the registry and finds no half version,
and ``gc(grace_seconds=0)`` removes the orphan blob (or the temporary file of the write).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Where the second registration is killed.
POINTS = {
    "blob-half-written": "the blob's temporary file is written, not yet moved to its name",
    "blob-written": "the blob is in place, the version's transaction not begun",
    "row-uncommitted": "the version row and its metrics are inserted, the commit not issued",
}


def _block(marker: str, note: str = "") -> None:
    Path(f"{marker}.tmp").write_text(note, encoding="utf-8")
    os.replace(f"{marker}.tmp", marker)  # the test sees the note whole or not at all
    while True:  # until SIGKILL
        time.sleep(60)


def _arm(registry: Any, point: str, marker: str) -> None:
    """Make the next registration stop at ``point``."""
    if point == "blob-half-written":
        registry.artifacts.fs.mv = lambda *args, **kwargs: _block(marker)
    elif point == "blob-written":
        registry.store.create_model_version = lambda *args, **kwargs: _block(marker)
    else:
        import sqlalchemy as sa

        def before_commit(conn: Any) -> None:
            # Fired by SQLAlchemy just before it sends COMMIT. Say what the transaction
            # holds, so the test knows it stopped the version's, not a read's.
            rows = conn.exec_driver_sql("SELECT count(*) FROM model_versions").scalar()
            _block(marker, f"{rows} version rows")

        sa.event.listen(registry.store._engine, "commit", before_commit)


def _child(url: str, artifacts: str, point: str, marker: str) -> None:
    from sklearn.linear_model import LogisticRegression

    from dmlsearch import Registry

    registry = Registry(url, artifacts)
    registry.register_model("clf", LogisticRegression(C=1.0), metrics={"score": 0.5})
    _arm(registry, point, marker)
    registry.register_model("clf", LogisticRegression(C=2.0), metrics={"score": 0.9})
    raise AssertionError("the second registration was not stopped")


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
    else:
        with postgres_schema(os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)) as url:
            yield url


def _kill_at(point: str, url: str, artifacts: Path, marker: Path) -> str:
    """Run the registering process, SIGKILL it at ``point``; return what it noted there."""
    proc = subprocess.Popen(
        [sys.executable, __file__, url, str(artifacts), point, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"the registering process ended early: {proc.communicate()[1]}")
            assert time.monotonic() < deadline, "the registering process never reached the point"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        return marker.read_text(encoding="utf-8")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize("point", list(POINTS))
def test_a_kill_during_register_model_leaves_no_half_version(
    registry_url: str, tmp_path: Path, point: str
) -> None:
    from sklearn.linear_model import LogisticRegression

    from dmlsearch import Registry
    from dmlsearch.registry import NotFoundError

    artifacts = tmp_path / "artifacts"
    note = _kill_at(point, registry_url, artifacts, tmp_path / "marker")
    if point == "row-uncommitted":
        assert note == "2 version rows"  # inside the uncommitted transaction

    with Registry(registry_url, str(artifacts), create=False) as registry:
        assert [v.version for v in registry.versions("clf")] == [1]
        assert registry.model_version("clf").version == 1
        assert registry.load_model("clf").C == 1.0
        with pytest.raises(NotFoundError):
            registry.load_model("clf", version=2)
        assert registry.search_models(metric="score")[0].metrics["score"] == 0.5
        assert registry.verify() == {("clf", 1): True}
        assert registry.verify_errors() == {}

        v1 = registry.model_version("clf").sha256
        files = registry.artifacts.blobs()
        orphans = [b for b in files if b.digest != v1]
        assert len(orphans) == 1, files  # the killed registration's blob (or its temp file)
        assert (orphans[0].digest is None) == (point == "blob-half-written")
        assert registry.gc() == []  # younger than the default grace period: kept
        assert registry.gc(grace_seconds=0) == [registry.artifacts.show(orphans[0].path)]
        assert [b.digest for b in registry.artifacts.blobs()] == [v1]
        assert registry.verify_errors() == {}

        # Nothing is left locked: the next registration takes the number the killed one
        # did not get.
        record = registry.register_model("clf", LogisticRegression(C=3.0))
        assert record.version == 2
        assert registry.load_model("clf", version=2).C == 3.0
        assert registry.verify() == {("clf", 1): True, ("clf", 2): True}


if __name__ == "__main__":
    _child(*sys.argv[1:5])
