"""Registry lifecycle: gc namespaces and grace, the recorded artifact store, opening without
creating, deleting experiments, model summaries, and wrong argument types."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from fsspec.implementations.local import LocalFileSystem
from sklearn.linear_model import LogisticRegression

from dmlsearch import Float, InvalidParameterError, Registry, SearchCV
from dmlsearch.registry import (
    ArtifactIntegrityError,
    ArtifactLocationError,
    ArtifactStore,
    NotFoundError,
    RegistryError,
    SQLStore,
    TrialRecord,
)
from dmlsearch.registry.artifacts import ArtifactWriteError
from dmlsearch.testing.registry_contract import POSTGRES_URL, postgres_schema

PG = os.environ.get("DMLSEARCH_TEST_POSTGRES", POSTGRES_URL)


@pytest.fixture(scope="module")
def models() -> tuple[np.ndarray, list[LogisticRegression]]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    return X, [LogisticRegression(C=c).fit(X, y) for c in (0.1, 1.0, 10.0)]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'reg.db'}"
    else:
        with postgres_schema(PG) as scoped:
            yield scoped


def _age(path: str | Path, seconds: float) -> None:
    """Make a file look ``seconds`` old."""
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def _blob_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# -- gc: namespaces, grace period, dry run ------------------------------------------------


def test_gc_never_deletes_another_registrys_blob(tmp_path, models, monkeypatch):
    """Issue 14: two SQLite registries in one folder shared one store; a.gc() lost b's model."""
    X, (m1, *_) = models
    monkeypatch.chdir(tmp_path)
    a = Registry("sqlite:///a.db")
    b = Registry("sqlite:///b.db")
    assert a.artifacts.root == b.artifacts.root == str(tmp_path / "dmlsearch-artifacts")
    assert a.registry_id != b.registry_id
    record = b.register_model("m", m1)
    for blob in _blob_files(tmp_path / "dmlsearch-artifacts"):
        _age(blob, 7200)  # past any grace period: only the namespace protects it
    assert a.gc() == []
    assert a.gc(grace_seconds=0) == []
    np.testing.assert_array_equal(b.load_model("m").predict(X), m1.predict(X))
    assert b.verify() == {("m", record.version): True}
    a.close()
    b.close()


def test_gc_grace_period_and_dry_run(url, tmp_path, models):
    X, (m1, m2, _) = models
    with Registry(url, str(tmp_path / "store")) as reg:
        kept = reg.register_model("m", m1)
        dropped = reg.register_model("m", m2)
        reg.delete_version("m", dropped.version)
        # A blob written by a registration still in flight: no version references it yet.
        _, in_flight = reg.artifacts.put(b"a model about to be registered")
        assert reg.gc() == []  # everything is younger than an hour
        for blob in _blob_files(tmp_path / "store"):
            _age(blob, 7200)
        _, fresh = reg.artifacts.put(b"another registration in flight")
        would = reg.gc(dry_run=True)
        assert sorted(Path(p).name for p in would) == sorted([dropped.sha256, in_flight])
        assert reg.artifacts.exists(dropped.sha256) and reg.artifacts.exists(in_flight)
        removed = reg.gc()
        assert sorted(removed) == sorted(would)
        assert all(Path(p).is_absolute() and not Path(p).exists() for p in removed)
        assert reg.artifacts.exists(fresh)  # within the grace period
        assert reg.artifacts.exists(kept.sha256)
        np.testing.assert_array_equal(reg.load_model("m", version=1).predict(X), m1.predict(X))
        with pytest.raises(InvalidParameterError, match="grace_seconds"):
            reg.gc(grace_seconds=-1)


def test_reregistering_an_old_unreferenced_blob_protects_it(tmp_path):
    """Registration refreshes an existing blob, so a gc in between cannot take it."""
    weights = {"w": [1.0, 2.0]}  # pickled to the same bytes every time
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as reg:
        first = reg.register_model("m", weights, allow_pickle=True)
        reg.delete_version("m", first.version)
        path = Path(first.artifact_uri)
        _age(path, 7200)
        again = reg.register_model("m", weights, allow_pickle=True)
        assert again.sha256 == first.sha256
        assert time.time() - path.stat().st_mtime < 60
        assert reg.gc() == []
        assert reg.load_model("m", allow_pickle=True) == weights


def test_gc_collects_temporary_files_of_crashed_writes(tmp_path):
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as reg:
        uri, _ = reg.artifacts.put(b"x")
        tmp = Path(f"{uri}.tmp-{'0' * 32}")
        tmp.write_bytes(b"partial")
        assert reg.gc() == []
        _age(tmp, 7200)
        _age(uri, 7200)
        assert sorted(reg.gc()) == sorted([uri, str(tmp)])


# -- refreshing a blob a gc takes ----------------------------------------------------------

#: Pickled to the same bytes every time, so registering it again reuses its blob.
WEIGHTS = {"w": [1.0, 2.0, 3.0]}


def test_refreshing_never_creates_a_blob(tmp_path):
    store = ArtifactStore(str(tmp_path / "store"), namespace="r")
    missing = f"{store.base}/ab/{'ab' * 32}"
    assert not store._refresh(missing)
    assert not Path(missing).exists() and not Path(missing).parent.exists()


def test_a_blob_collected_just_before_its_refresh_is_written_again(url, tmp_path, monkeypatch):
    """Probe p05: a gc deleted the blob between the registration's check and its refresh;
    fsspec's touch(truncate=False) then created an empty file, committed as the version."""
    store = str(tmp_path / "store")
    with Registry(url, store) as reg, Registry(url, store) as collector:
        first = reg.register_model("m", WEIGHTS, allow_pickle=True)
        reg.delete_version("m", first.version)
        blob = Path(first.artifact_uri)
        _age(blob, 7200)  # unreferenced and past the grace period: gc takes it
        refresh = ArtifactStore._refresh

        def collected_first(self: ArtifactStore, path: str) -> bool:
            assert [Path(p) for p in collector.gc()] == [blob]
            return refresh(self, path)

        monkeypatch.setattr(ArtifactStore, "_refresh", collected_first)
        again = reg.register_model("m", WEIGHTS, allow_pickle=True)
        monkeypatch.setattr(ArtifactStore, "_refresh", refresh)
        assert again.sha256 == first.sha256
        assert blob.stat().st_size == len(reg.artifacts.get(again.sha256))
        assert reg.verify_errors() == {}
        assert reg.load_model("m", allow_pickle=True) == WEIGHTS


def test_a_blob_damaged_while_it_is_refreshed_is_rewritten(tmp_path, monkeypatch):
    """The blob is checked after its refresh, not before: what is committed is intact."""
    store = ArtifactStore(str(tmp_path / "store"), namespace="r")
    uri, digest = store.put(b"a model's bytes")
    refresh = ArtifactStore._refresh

    def truncated_first(self: ArtifactStore, path: str) -> bool:
        Path(path).write_bytes(b"")
        return refresh(self, path)

    monkeypatch.setattr(ArtifactStore, "_refresh", truncated_first)
    assert store.put(b"a model's bytes") == (uri, digest)
    assert Path(uri).read_bytes() == b"a model's bytes"


# -- gc while registrations commit ----------------------------------------------------------


def _collect_with(reg: Registry, monkeypatch: pytest.MonkeyPatch, *, on_read: Any) -> list[str]:
    """``reg.gc(grace_seconds=0)`` with ``on_read(n)`` run after its n-th read of the
    references (a registration in another process committing just then)."""
    real = reg.store.referenced_artifacts
    reads: list[int] = []

    def read() -> set[str]:
        referenced = real()
        reads.append(1)
        on_read(len(reads))
        return referenced

    monkeypatch.setattr(reg.store, "referenced_artifacts", read)
    try:
        return reg.gc(grace_seconds=0)
    finally:
        monkeypatch.setattr(reg.store, "referenced_artifacts", real)


def test_gc_keeps_a_blob_registered_after_it_read_the_references(url, tmp_path, monkeypatch):
    """Probe p04: gc read the references once, before listing the store; a version that
    committed after that read (its post-commit check passed) lost its blob to the gc."""
    store = str(tmp_path / "store")
    with Registry(url, store) as collector, Registry(url, store) as writer:
        first = writer.register_model("m", WEIGHTS, allow_pickle=True)
        writer.delete_version("m", first.version)
        versions = []

        def register(n: int) -> None:
            if n == 1:  # commits (and checks its blob) right after gc's first read
                versions.append(writer.register_model("m", WEIGHTS, allow_pickle=True))

        assert _collect_with(collector, monkeypatch, on_read=register) == []
        assert [v.sha256 for v in versions] == [first.sha256]
        assert writer.verify_errors() == {}
        assert writer.load_model("m", allow_pickle=True) == WEIGHTS
        assert sorted(p.name for p in Path(first.artifact_uri).parent.iterdir()) == [
            first.sha256
        ]  # put back, nothing left aside


def test_a_registration_committing_after_gc_writes_its_blob_again(url, tmp_path, monkeypatch):
    """The last race: the version commits after gc's last read and the gc deletes its blob;
    the registration's check after committing writes it again."""
    store = str(tmp_path / "store")
    with Registry(url, store) as collector, Registry(url, store) as writer:
        first = writer.register_model("m", WEIGHTS, allow_pickle=True)
        writer.delete_version("m", first.version)
        commit = writer.store.create_model_version
        removed: list[str] = []

        def collected_then_commit(*args: Any, **kwargs: Any) -> Any:
            removed.extend(collector.gc(grace_seconds=0))
            return commit(*args, **kwargs)

        monkeypatch.setattr(writer.store, "create_model_version", collected_then_commit)
        again = writer.register_model("m", WEIGHTS, allow_pickle=True)
        assert [Path(p) for p in removed] == [Path(first.artifact_uri)]
        assert again.sha256 == first.sha256
        assert writer.verify_errors() == {}


def test_a_blob_left_aside_by_an_interrupted_gc_is_put_back_if_referenced(url, tmp_path):
    with Registry(url, str(tmp_path / "store")) as reg:
        used = reg.register_model("m", WEIGHTS, allow_pickle=True)
        dropped = reg.register_model("m", {"other": 1}, allow_pickle=True)
        reg.delete_version("m", dropped.version)
        # What a gc killed between moving blobs aside and reading the references leaves.
        for record in (used, dropped):
            path = Path(record.artifact_uri)
            path.rename(f"{path}.gc-{'0' * 32}")
        assert reg.gc(grace_seconds=0, dry_run=True) == [f"{dropped.artifact_uri}.gc-{'0' * 32}"]
        assert not Path(used.artifact_uri).exists()  # a dry run moves nothing
        assert reg.gc(grace_seconds=0) == [f"{dropped.artifact_uri}.gc-{'0' * 32}"]
        assert reg.verify_errors() == {}
        assert sorted(p.name for p in Path(used.artifact_uri).parent.iterdir()) == [used.sha256]


def test_a_temporary_file_a_gc_takes_mid_write_is_written_again(tmp_path, monkeypatch):
    """A gc with no grace period cannot tell a write in flight from a crashed one's file."""
    store = ArtifactStore(str(tmp_path / "store"), namespace="r")
    move = store.fs.mv
    taken: list[str] = []

    def collected_first(source: str, target: str, **kwargs: Any) -> None:
        if not taken:
            taken.extend(store.collect(set, grace_seconds=0))
        move(source, target, **kwargs)

    monkeypatch.setattr(store.fs, "mv", collected_first)
    _, digest = store.put(b"a model's bytes")
    assert len(taken) == 1 and ".tmp-" in taken[0]
    assert store.get(digest) == b"a model's bytes"


# -- artifact stores that cannot be written ------------------------------------------------


@contextmanager
def _unwritable(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``folder`` (created) made unwritable for this process: by chmod, or for root, whom
    chmod does not stop, by the immutable attribute; where root may not set it either (a
    container without CAP_LINUX_IMMUTABLE), writes under it fail as on a read-only mount."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK):
        try:
            done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
            immutable = done.returncode == 0
        except OSError:  # no chattr
            pass
        if not immutable:
            _read_only_mount(folder, monkeypatch)
    try:
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def _read_only_mount(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a read-only file system does under ``folder``: access() says no, writes EROFS."""

    def under(path: Any) -> bool:
        return str(path).startswith(str(folder))

    def refuse(path: Any) -> OSError:
        return OSError(errno.EROFS, "Read-only file system", str(path))

    access, makedirs, open_ = os.access, LocalFileSystem.makedirs, LocalFileSystem._open

    def no_access(path: Any, mode: int, **kwargs: Any) -> bool:
        return False if under(path) and mode & os.W_OK else access(path, mode, **kwargs)

    def no_makedirs(self: Any, path: str, exist_ok: bool = False) -> None:
        if under(path) and not os.path.isdir(path):
            raise refuse(path)
        makedirs(self, path, exist_ok=exist_ok)

    def no_write(self: Any, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if under(path) and set(mode) & set("wax+"):
            raise refuse(path)
        return open_(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", no_access)
    monkeypatch.setattr(LocalFileSystem, "makedirs", no_makedirs)
    monkeypatch.setattr(LocalFileSystem, "_open", no_write)


def test_a_store_that_cannot_be_written_is_a_registry_error(url, tmp_path, monkeypatch):
    """Probe p11: registering into an unwritable artifact folder raised a raw PermissionError."""
    store = tmp_path / "store"
    with Registry(url, str(store)) as reg, _unwritable(store, monkeypatch):
        with pytest.raises(ArtifactWriteError) as info:
            reg.register_model("m", WEIGHTS, allow_pickle=True)
        message = str(info.value)
        assert isinstance(info.value, RegistryError) and "\n" not in message
        assert f"the artifact store {store} cannot be written ({store}/" in message
        assert "make it writable" in message and "artifacts=ANOTHER_LOCATION" in message
        assert reg.models() == []  # nothing registered


def test_a_full_disk_is_a_registry_error_naming_the_store(tmp_path, monkeypatch):
    store = ArtifactStore(str(tmp_path / "store"), namespace="r")
    open_ = LocalFileSystem._open

    def full(self: Any, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        return open_(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", full)
    with pytest.raises(ArtifactWriteError, match=r"No space left on device\); make it writable"):
        store.put(b"a model's bytes")
    monkeypatch.undo()
    assert store.blobs() == []  # no partial blob, no temporary file


def test_a_registry_does_not_record_an_artifact_folder_it_cannot_write(url, tmp_path, monkeypatch):
    """Probe p11: an unwritable folder was recorded as the registry's artifact store."""
    ro = tmp_path / "ro"
    with _unwritable(ro, monkeypatch):
        for location in (ro, ro / "sub"):
            with pytest.raises(ArtifactLocationError, match="cannot write") as info:
                Registry(url, str(location))
            assert info.value.param == "artifacts" and str(ro) in str(info.value)
    with Registry(url, str(tmp_path / "ok")) as reg:  # nothing was recorded
        assert reg.recorded_artifacts == str(tmp_path / "ok")
    with (
        pytest.warns(UserWarning, match="pass artifacts='.*elsewhere' on every open"),
        Registry(url, str(tmp_path / "elsewhere")),
    ):
        pass


@contextmanager
def _unreachable(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Writes under ``folder`` fail as botocore's do for an endpoint that does not answer:
    with an exception that is not an OSError."""
    open_ = LocalFileSystem._open

    def no_answer(self: Any, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith(str(folder)) and set(mode) & set("wax+"):
            raise RuntimeError('Could not connect to the endpoint URL: "http://s3:9000/"')
        return open_(self, path, mode, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "_open", no_answer)
    yield


@pytest.mark.cluster
@pytest.mark.parametrize("failing", [_unwritable, _unreachable])
def test_a_search_whose_store_cannot_be_written_warns_and_completes(
    url, tmp_path, client, models, monkeypatch, failing
):
    """Probe p12: fit raised PermissionError after every trial, the experiment "failed";
    and so it did for botocore's EndpointConnectionError, which is not an OSError."""
    X, _ = models
    y = (X[:, 0] > 0).astype(int)
    store = tmp_path / "store"
    with Registry(url, str(store)) as reg, failing(store, monkeypatch):
        search = SearchCV(
            LogisticRegression(),
            {"C": Float(0.1, 1.0)},
            n_trials=2,
            cv=2,
            client=client,
            registry=reg,
            experiment_name="ro",
            progress=False,
        )
        with pytest.warns(UserWarning, match="not registered: cannot store the model"):
            search.fit(X, y)
        assert getattr(search, "model_version_", None) is None
        assert reg.experiment("ro").status == "complete"
        assert reg.models() == []


# -- locations other processes would not find ------------------------------------------------


def _record_artifacts(url: str, location: str) -> None:
    """Record ``location`` as an older dmlsearch, which did not check it, could have."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE registry_info SET value = :v WHERE key = 'artifacts'"),
                {"v": location},
            )
    finally:
        engine.dispose()


def test_memory_store_is_refused_for_a_registry_other_processes_open(url, tmp_path):
    """Probe p11: memory:// was recorded as a PostgreSQL registry's artifact store; every
    other process found none of its models."""
    with pytest.raises(ArtifactLocationError, match="exists in this process only") as info:
        Registry(url, "memory://team-store")
    assert info.value.param == "artifacts" and "sqlite://" in str(info.value)
    with Registry(url, str(tmp_path / "store")) as reg:  # nothing was recorded
        assert reg.recorded_artifacts == str(tmp_path / "store")
    with pytest.raises(ArtifactLocationError, match="exists in this process only"):
        Registry(url, "memory://for-this-session")
    # Recorded by a version that did not check it: the message says how to open it anyway.
    _record_artifacts(url, "memory://team-store")
    with pytest.raises(RegistryError, match="records it; open it with artifacts="):
        Registry(url, create=False)
    with pytest.warns(UserWarning), Registry(url, str(tmp_path / "store"), create=False) as reg:
        assert reg.artifacts.protocol == "file"


def test_a_refused_open_leaves_no_new_database_file_behind(tmp_path):
    # Found by a probe: `dmlsearch run` refused the artifact store and left the new SQLite
    # file, its tables and a registry id, behind.
    db = tmp_path / "new.db"
    with pytest.raises(ArtifactLocationError, match="exists in this process only"):
        Registry(f"sqlite:///{db}", "memory://x")
    assert not db.exists() and list(tmp_path.iterdir()) == []
    with Registry(f"sqlite:///{db}", str(tmp_path / "store")):
        pass
    with pytest.raises(ArtifactLocationError):  # an existing registry is never removed
        Registry(f"sqlite:///{db}", "memory://x")
    with Registry(f"sqlite:///{db}", create=False) as reg:
        assert reg.recorded_artifacts == str(tmp_path / "store")


def test_memory_store_works_with_an_in_memory_registry():
    with Registry("sqlite://", "memory://dmlsearch-test-store") as reg:
        reg.register_model("m", WEIGHTS, allow_pickle=True)
        assert reg.load_model("m", allow_pickle=True) == WEIGHTS
        assert reg.verify_errors() == {}
        reg.artifacts.fs.rm(reg.artifacts.root, recursive=True)  # memory:// is per process


def test_file_urls_are_decoded_as_rfc_8089_says(url, tmp_path, monkeypatch):
    """Probe p10: file:///tmp/a%20b wrote to a folder named a%20b (what Path.as_uri() gives
    for "a b"), and file://relative_dir was recorded as given, failing from another folder."""
    spaced = tmp_path / "a b"
    with Registry(url, spaced.as_uri()) as reg:
        assert reg.recorded_artifacts == str(spaced)
        record = reg.register_model("m", WEIGHTS, allow_pickle=True)
    assert Path(record.artifact_uri).is_relative_to(spaced)
    assert not (tmp_path / "a%20b").exists()
    monkeypatch.chdir(tmp_path.parent)
    with Registry(url, create=False) as reader:
        assert reader.load_model("m", allow_pickle=True) == WEIGHTS
    # The same folder written otherwise is the same location: no "differs" warning.
    for same in (f"file://localhost{spaced}", f"local://{spaced}", f"{spaced}/"):
        with Registry(url, same, create=False) as reader:
            assert reader.artifacts.root == str(spaced)
    assert ArtifactStore(f"file://{tmp_path}/x%23y").root == str(tmp_path / "x#y")


def test_a_file_url_naming_a_host_is_refused(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArtifactLocationError, match="three slashes") as info:
        Registry(url, "file://relative_dir")
    assert info.value.param == "artifacts" and "'relative_dir'" in str(info.value)
    with Registry(url, "relative_dir") as reg:  # a plain relative path is made absolute
        assert reg.recorded_artifacts == str(tmp_path / "relative_dir")
    # Recorded by a version that took it as given: say how to open the registry anyway.
    _record_artifacts(url, "file://relative_dir")
    with pytest.raises(RegistryError, match="records it; open it with artifacts="):
        Registry(url, create=False)
    with (
        pytest.warns(UserWarning, match="for this session only"),
        Registry(url, "relative_dir", create=False) as reg,
    ):
        assert reg.artifacts.root == str(tmp_path / "relative_dir")


# -- older registries ---------------------------------------------------------------------


def _make_legacy(url: str, store_dir: Path, model: LogisticRegression) -> str:
    """A registry as dmlsearch wrote it before namespaces: schema 1, blobs at <root>/xx/sha."""
    with Registry(url, str(store_dir)) as reg:
        record = reg.register_model("m", model)
        namespaced = Path(record.artifact_uri)
        legacy = store_dir / record.sha256[:2] / record.sha256
        legacy.parent.mkdir(parents=True)
        shutil.move(namespaced, legacy)
        with reg.store.engine.begin() as conn:  # type: ignore[attr-defined]
            conn.execute(sa.text("DROP TABLE registry_info"))
            conn.execute(sa.text("UPDATE schema_info SET version = 1"))
            conn.execute(sa.text("UPDATE model_versions SET artifact_uri = :u"), {"u": str(legacy)})
    return record.sha256


def test_registry_from_an_older_version_still_loads(url, tmp_path, models):
    X, (m1, m2, _) = models
    store_dir = tmp_path / "shared-store"
    digest = _make_legacy(url, store_dir, m1)
    # Reading without creating works on the old schema and finds the old blob.
    with Registry(url, str(store_dir), create=False) as reader:
        np.testing.assert_array_equal(reader.load_model("m").predict(X), m1.predict(X))
    with Registry(url, str(store_dir)) as reg:
        assert reg.store.schema_version() == 2  # type: ignore[attr-defined]
        assert reg.registry_id is not None
        np.testing.assert_array_equal(reg.load_model("m").predict(X), m1.predict(X))
        assert reg.verify() == {("m", 1): True}
        reg.register_model("m", m2)
        reg.delete_version("m", 1)
        # A blob of the old shared layout may belong to any registry: never collected.
        assert reg.gc(grace_seconds=0) == []
        assert (store_dir / digest[:2] / digest).exists()
        np.testing.assert_array_equal(reg.load_model("m").predict(X), m2.predict(X))


# -- where the artifacts are --------------------------------------------------------------


def test_postgres_registry_finds_its_artifacts_from_another_folder(tmp_path, models, monkeypatch):
    """Issue 15 item 7: the store is recorded at creation, not taken from the working folder."""
    X, (m1, *_) = models
    monkeypatch.delenv("DMLSEARCH_ARTIFACTS", raising=False)
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    with postgres_schema(PG) as scoped:
        monkeypatch.chdir(first)
        with Registry(scoped) as reg:
            reg.register_model("m", m1)
            recorded = reg.recorded_artifacts
        assert recorded == str(first / "dmlsearch-artifacts")
        monkeypatch.chdir(second)
        with Registry(scoped, create=False) as reader:
            assert reader.artifacts.root == recorded
            assert reader.verify() == {("m", 1): True}
            np.testing.assert_array_equal(reader.load_model("m").predict(X), m1.predict(X))
        # DMLSEARCH_ARTIFACTS only chooses the store of a registry being created.
        monkeypatch.setenv("DMLSEARCH_ARTIFACTS", str(second / "elsewhere"))
        with Registry(scoped) as reg:
            assert reg.artifacts.root == recorded


def test_explicit_artifacts_that_disagree_win_for_the_session_with_a_warning(tmp_path, models):
    X, (m1, *_) = models
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with Registry(url) as reg:
        record = reg.register_model("m", m1)
    mounted = tmp_path / "mounted-elsewhere"
    shutil.copytree(tmp_path / "dmlsearch-artifacts", mounted)
    with (
        pytest.warns(UserWarning, match="for this session only"),
        Registry(url, str(mounted)) as reg,
    ):
        assert reg.artifacts.root == str(mounted)
        assert reg.recorded_artifacts == str(tmp_path / "dmlsearch-artifacts")
        np.testing.assert_array_equal(reg.load_model("m").predict(X), m1.predict(X))
    # The recorded location is unchanged; the same location given explicitly is silent.
    with Registry(url, str(tmp_path / "dmlsearch-artifacts")) as reg:
        assert reg.store.get_meta("artifacts") == "dmlsearch-artifacts"
        assert reg.load_model("m", version=record.version) is not None


def test_sqlite_registry_moved_with_its_artifacts_still_loads(tmp_path, models):
    X, (m1, *_) = models
    old, new = tmp_path / "old", tmp_path / "new"
    with Registry(f"sqlite:///{old / 'r.db'}") as reg:
        reg.register_model("m", m1)
    shutil.move(old, new)
    with Registry(f"sqlite:///{new / 'r.db'}", create=False) as reg:
        assert reg.artifacts.root == str(new / "dmlsearch-artifacts")
        np.testing.assert_array_equal(reg.load_model("m").predict(X), m1.predict(X))


def test_missing_artifact_names_its_path_and_the_store(url, tmp_path, models):
    _, (m1, *_) = models
    with Registry(url, str(tmp_path / "store")) as reg:
        record = reg.register_model("clf", m1)
        Path(record.artifact_uri).unlink()
        with pytest.raises(ArtifactIntegrityError) as info:
            reg.load_model("clf")
        message = str(info.value)
        assert record.artifact_uri in message
        assert "model 'clf' version 1" in message
        assert f"records its artifact store at {tmp_path / 'store'}" in message
        assert "artifacts=" in message
        errors = reg.verify_errors()
        assert list(errors) == [("clf", 1)]
        assert record.artifact_uri in errors[("clf", 1)]
        assert reg.verify() == {("clf", 1): False}


# -- opening: reading never creates; clear errors for bad URLs ---------------------------


def test_reading_does_not_create_a_postgres_registry():
    with postgres_schema(PG) as scoped:
        with pytest.raises(RegistryError, match="no registry at postgresql") as info:
            Registry(scoped, create=False)
        assert "\n" not in str(info.value)
        engine = sa.create_engine(scoped)
        try:
            with engine.connect() as conn:
                assert sa.inspect(conn).get_table_names() == []
        finally:
            engine.dispose()
        with Registry(scoped) as reg:  # creating is still the default
            assert reg.experiments().empty
        with Registry(scoped, create=False) as reg:
            assert reg.models() == []


def test_reading_does_not_create_a_sqlite_file(tmp_path):
    path = tmp_path / "sub" / "none.db"
    with pytest.raises(RegistryError, match="does not exist"):
        Registry(f"sqlite:///{path}", create=False)
    assert not path.parent.exists()


def test_a_postgres_database_that_does_not_exist_is_one_line():
    url = sa.make_url(PG).set(database="dmlsearch_no_such_db")
    shown = url.render_as_string(hide_password=False)
    with pytest.raises(RegistryError) as info:
        Registry(shown)
    message = str(info.value)
    assert "\n" not in message
    assert "dmlsearch_no_such_db" in message and "does not exist" in message
    assert "CREATE DATABASE dmlsearch_no_such_db" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_file_name_is_not_a_url():
    with pytest.raises(RegistryError, match=r"write sqlite:///foo\.db") as info:
        Registry("foo.db")
    assert "\n" not in str(info.value)
    with pytest.raises(RegistryError, match="not a database URL"):
        SQLStore("foo.db")


# -- deleting experiments -----------------------------------------------------------------


def test_delete_experiment(url, tmp_path, models):
    X, (m1, m2, _) = models
    with Registry(url, str(tmp_path / "store")) as reg:
        for name, status in (("failed-run", "failed"), ("other", "complete")):
            exp = reg.store.create_experiment(name)
            reg.store.record_trials(
                exp.id, [TrialRecord(exp.id, n, "complete", {}, {}, value=0.5) for n in range(4)]
            )
            reg.store.set_experiment_status(exp.id, status)
        from_failed = reg.register_model("best", m1, experiment="failed-run")
        reg.register_model("other-best", m2, experiment="other")
        # An orphan blob (a crashed registration) past the grace period, and a fresh one.
        _, orphan = reg.artifacts.put(b"orphan")
        _age(reg.artifacts.locate(orphan) or "", 7200)
        _, fresh = reg.artifacts.put(b"in flight")
        with pytest.raises(NotFoundError, match="did you mean 'failed-run'"):
            reg.delete_experiment("failed-rn")
        summary = reg.delete_experiment("failed-run")
        assert summary["experiment"] == "failed-run"
        assert summary["trials"] == 4
        assert [Path(p).name for p in summary["artifacts"]] == [orphan]
        with pytest.raises(NotFoundError):
            reg.experiment("failed-run")
        assert list(reg.experiments()["name"]) == ["other"]
        assert len(reg.trials("other")) == 4
        # Model versions (and so their blobs) are kept, whichever experiment they came from.
        assert reg.model_version("best").lineage["experiment"] == "failed-run"
        np.testing.assert_array_equal(reg.load_model("best").predict(X), m1.predict(X))
        assert reg.verify() == {("best", 1): True, ("other-best", 1): True}
        assert reg.artifacts.exists(fresh)
        assert from_failed.version == 1
        # The name is free again.
        reg.store.create_experiment("failed-run")
        assert reg.delete_experiment("failed-run", force=True)["trials"] == 0
        with pytest.raises(NotFoundError):
            reg.delete_experiment(10_000)


def test_delete_experiment_refuses_one_a_live_driver_runs_unless_forced(url, tmp_path):
    # The CLI refused; the Python API deleted it, and the driver's run failed.
    import socket
    import subprocess
    import sys

    from dmlsearch._experiment import FORCE_RESUME

    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Registry(url, str(tmp_path / "store")) as reg, pytest.MonkeyPatch.context() as mp:
            mp.delenv(FORCE_RESUME, raising=False)
            mine = {"driver": {"host": socket.gethostname(), "pid": driver.pid}}
            exp = reg.store.create_experiment("live", config=mine)
            reg.store.record_trials(exp.id, [TrialRecord(exp.id, 0, "complete", {}, {}, value=1)])
            with pytest.raises(InvalidParameterError) as info:
                reg.delete_experiment("live")
            message = str(info.value)
            assert f"process {driver.pid} on this host" in message
            assert "`registry.delete_experiment(name, force=True)`" in message
            assert "delete it now with" in message
            assert len(reg.trials("live")) == 1
            assert reg.delete_experiment("live", force=True)["trials"] == 1
    finally:
        driver.kill()
        driver.wait()


# -- models: summaries, aliases, versions, "did you mean" ---------------------------------


def test_model_summaries_and_deleting_aliases_and_versions(url, tmp_path, models):
    _, (m1, m2, m3) = models
    with Registry(url, str(tmp_path / "store")) as reg:
        assert list(reg.model_summaries().columns) == [
            "name",
            "latest_version",
            "versions",
            "aliases",
            "created",
            "updated",
        ]
        for m in (m1, m2, m3):
            reg.register_model("clf", m)
        reg.register_model("reg", m1)
        reg.set_alias("clf", "champion", 2)
        reg.set_alias("clf", "challenger", 3)
        frame = reg.model_summaries()
        assert list(frame["name"]) == ["clf", "reg"]
        clf = frame.iloc[0]
        assert (clf["latest_version"], clf["versions"]) == (3, 3)
        assert clf["aliases"] == {"challenger": 3, "champion": 2}
        assert str(clf["created"].tz) == "UTC"
        reg.delete_alias("clf", "challenger")
        assert reg.model_version("clf", version=3).aliases == []
        with pytest.raises(NotFoundError, match="no alias 'challenger'"):
            reg.delete_alias("clf", "challenger")
        reg.delete_version("clf", 3)
        assert [v.version for v in reg.versions("clf")] == [1, 2]
        assert reg.model_summaries().iloc[0]["latest_version"] == 2
        assert reg.models() == ["clf", "reg"]  # still bare names, as before
        for call in (
            lambda: reg.load_model("clff"),
            lambda: reg.model_version("clff@champion"),
            lambda: reg.delete_alias("clff", "champion"),
            lambda: reg.delete_version("clff", 1),
            lambda: reg.set_alias("clff", "x", 1),
            lambda: reg.versions("clff"),
        ):
            with pytest.raises(NotFoundError, match=r"no model 'clff'.*did you mean 'clf'"):
                call()
        with pytest.raises(NotFoundError, match="no version 9 of model 'clf'"):
            reg.delete_version("clf", 9)


def test_wrong_types_are_refused_with_what_to_pass(tmp_path, models):
    _, (m1, *_) = models
    with Registry(f"sqlite:///{tmp_path / 'r.db'}") as reg:
        record = reg.register_model("clf", m1)
        with pytest.raises(InvalidParameterError, match="name") as info:
            reg.load_model(record)  # type: ignore[arg-type]
        assert "load_model(record.model, version=record.version)" in str(info.value)
        assert info.value.param == "name"
        with pytest.raises(InvalidParameterError, match="version"):
            reg.load_model("clf", version="1")  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="alias"):
            reg.set_alias("clf", 1, 1)  # type: ignore[arg-type]
        exp = reg.store.create_experiment("e")
        with pytest.raises(InvalidParameterError, match=r"record\.name or record\.id"):
            reg.trials(exp)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="experiment"):
            reg.register_model("clf", m1, experiment=1.5)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="url"):
            Registry(Path("x.db"))  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="dry_run"):
            reg.gc(dry_run="yes")  # type: ignore[arg-type]
