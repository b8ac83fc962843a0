"""The artifact store on fsspec backends: errors that are not OSError (botocore's), fsspec
storage options, locations fsspec would not use as written, read-only protocols."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import _registry as fsspec_registry

from dmlsearch import Registry
from dmlsearch.config import ConfigError, load_config, make_registry
from dmlsearch.exceptions import InvalidParameterError
from dmlsearch.registry import (
    ArtifactIntegrityError,
    ArtifactLocationError,
    ArtifactStore,
    RegistryError,
)
from dmlsearch.registry.artifacts import (
    ArtifactWriteError,
    check_location,
    location_protocols,
)

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
WEIGHTS = {"w": [1.0, 2.0]}


class BackendDown(Exception):
    """What botocore raises for a store it cannot reach: not an OSError."""


class Unreachable(MemoryFileSystem):
    """A memory store that stops answering when ``down`` is set (as S3 behind a dead
    endpoint): every call raises :class:`BackendDown`, or ``error`` when set."""

    protocol = "unreachable"
    down = False
    error: BaseException | None = None

    def _fail(self) -> None:
        if self.down:
            raise self.error or BackendDown('Could not connect to the endpoint URL: "x"')

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        self._fail()
        return super()._open(path, mode, *args, **kwargs)

    def exists(self, path: str, **kwargs: Any) -> bool:
        self._fail()
        return bool(super().exists(path, **kwargs))


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[Unreachable]]:
    monkeypatch.setitem(fsspec_registry, "unreachable", Unreachable)
    monkeypatch.setattr(Unreachable, "down", False)
    monkeypatch.setattr(Unreachable, "error", None)
    yield Unreachable
    MemoryFileSystem.store.clear()
    MemoryFileSystem.pseudo_dirs[:] = [""]


# -- fix 1: any backend error is ours, naming the store ----------------------------------------


def test_a_backend_error_writing_is_an_artifact_write_error(unreachable):
    """Probe: botocore's EndpointConnectionError (not an OSError) left put() raw, so a
    search failed after all its trials instead of warning that its model was not
    registered."""
    store = ArtifactStore("unreachable://team/models", namespace="r")
    unreachable.down = True
    with pytest.raises(ArtifactWriteError) as info:
        store.put(b"a model's bytes")
    message = str(info.value)
    assert isinstance(info.value, RegistryError) and "\n" not in message
    assert message.startswith("cannot store the model: the artifact store unreachable://team")
    assert "BackendDown: Could not connect to the endpoint URL" in message
    assert "can be reached and written" in message
    assert isinstance(info.value.__cause__, BackendDown)
    # Ours, and an interrupt, go through as they are.
    unreachable.error = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        store.put(b"a model's bytes")
    unreachable.error = ArtifactIntegrityError("ours")
    with pytest.raises(ArtifactIntegrityError, match="ours"):
        store.put(b"a model's bytes")


def test_a_backend_error_reading_names_the_store(unreachable):
    with Registry("sqlite://", "unreachable://team/models") as reg:
        reg.register_model("m", WEIGHTS, allow_pickle=True)
        unreachable.down = True
        calls = [
            lambda: reg.load_model("m", allow_pickle=True),
            reg.verify,  # not "version 1 is bad": the store could not say
            lambda: reg.artifacts.exists("0" * 64),
            reg.gc,
        ]
        for call in calls:
            with pytest.raises(RegistryError) as info:
                call()
            message = str(info.value)
            assert not isinstance(info.value, ArtifactIntegrityError)
            assert "the artifact store unreachable://team/models cannot be" in message
            assert "BackendDown" in message and isinstance(info.value.__cause__, BackendDown)
        unreachable.down = False
        assert reg.verify() == {("m", 1): True}


def test_a_store_that_cannot_be_read_just_after_the_write_still_registers(
    unreachable, monkeypatch, caplog
):
    """The check after the commit (has a gc taken the blob?) read a store that went down
    between the write and the check, and called a committed version not registered."""
    with Registry("sqlite://", "unreachable://team/models") as reg:
        write = reg.artifacts.put

        def put_then_go_down(data: bytes) -> Any:
            written = write(data)
            unreachable.down = True
            return written

        monkeypatch.setattr(reg.artifacts, "put", put_then_go_down)
        with caplog.at_level("WARNING", logger="dmlsearch.registry"):
            record = reg.register_model("m", WEIGHTS, allow_pickle=True)
        assert record.version == 1 and "could not check m v1's blob" in caplog.text
        unreachable.down = False
        assert reg.load_model("m", allow_pickle=True) == WEIGHTS


# -- fix 3: storage options -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def no_s3_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing but storage_options may tell s3fs where the store is."""
    pytest.importorskip("s3fs")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "FSSPEC_S3_ENDPOINT_URL",
                 "FSSPEC_S3", "AWS_PROFILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "not-these")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-these")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """An S3 server (moto) on a free port, with a bucket ``models``."""
    pytest.importorskip("s3fs")
    server_module = pytest.importorskip("moto.server")
    import botocore.session

    port = _free_port()
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        botocore.session.get_session().create_client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="k",
            aws_secret_access_key="s",
            region_name="us-east-1",
        ).create_bucket(Bucket="models")
        yield endpoint
    finally:
        server.stop()


SECRET = "s3cr3t-never-recorded"


def test_storage_options_reach_the_store_and_are_never_recorded(
    moto_endpoint, no_s3_environment, tmp_path
):
    """Probe: only environment variables could point s3fs at an endpoint."""
    options = {"endpoint_url": moto_endpoint, "key": "k", "secret": SECRET}
    db = tmp_path / "r.db"
    with Registry(f"sqlite:///{db}", "s3://models/team", storage_options=options) as reg:
        record = reg.register_model("m", WEIGHTS, allow_pickle=True)
        assert record.artifact_uri.startswith("s3://models/team/")
        assert reg.load_model("m", allow_pickle=True) == WEIGHTS
        assert SECRET not in repr(reg) + repr(reg.artifacts)
    with Registry(f"sqlite:///{db}", create=False, storage_options=options) as reader:
        assert reader.verify() == {("m", 1): True}
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert SECRET not in dump and moto_endpoint not in dump
    with pytest.raises(InvalidParameterError, match="storage_options: expected a mapping"):
        Registry("sqlite://", storage_options=["endpoint_url"])  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="option names \\(str\\) as keys"):
        Registry("sqlite://", storage_options={1: SECRET})  # type: ignore[dict-item]


def test_an_unreachable_s3_endpoint_is_one_artifact_write_error(no_s3_environment):
    """The probe's case with botocore itself (one attempt, not ~25 s of retries)."""
    options = {
        "endpoint_url": f"http://127.0.0.1:{_free_port()}",
        "key": "k",
        "secret": SECRET,
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    with Registry("sqlite://", "s3://models/team", storage_options=options) as reg:
        with pytest.raises(ArtifactWriteError) as info:
            reg.register_model("m", WEIGHTS, allow_pickle=True)
        assert "the artifact store s3://models/team cannot be written" in str(info.value)
        assert "EndpointConnectionError" in str(info.value) and SECRET not in str(info.value)
        assert reg.models() == []


def test_the_experiment_file_passes_storage_options(tmp_path):
    options = "{auto_mkdir: true, password: " + SECRET + "}"
    cfg = load_config(
        EXPERIMENTS / "quickstart.yaml",
        overrides=[
            f"registry.url=sqlite:///{tmp_path / 'r.db'}",
            f"registry.artifacts={tmp_path / 'store'}",
            f"registry.storage_options={options}",
        ],
    )
    assert SECRET not in repr(cfg.registry)
    with make_registry(cfg) as reg:
        assert reg.artifacts.storage_options == {"auto_mkdir": True, "password": SECRET}
    # Never echoed (an override on the command line is echoed as typed: it is not a file).
    text = (EXPERIMENTS / "quickstart.yaml").read_text(encoding="utf-8")
    for value, expected in (
        ("[a, " + SECRET + "]", "expected a mapping of fsspec storage options"),
        ("{1: " + SECRET + "}", "expected option names as keys, got 1"),
    ):
        path = tmp_path / "exp.yaml"
        path.write_text(f"{text}\nregistry:\n  storage_options: {value}\n", encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert expected in str(info.value) and SECRET not in str(info.value)


# -- fix 4: locations fsspec would not use as written ------------------------------------------


def test_a_local_path_with_double_colons_is_the_folder_it_names(tmp_path):
    """Probe: /x/a::b/store was recorded as given but its blobs went to /x/a (fsspec's URL
    chaining), and verify passed."""
    location = tmp_path / "a::b" / "store"
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", str(location)) as reg:
        record = reg.register_model("m", WEIGHTS, allow_pickle=True)
        assert reg.recorded_artifacts == str(location)
    assert Path(record.artifact_uri).is_relative_to(location) and Path(record.artifact_uri).exists()
    assert not (tmp_path / "a").exists()
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", create=False) as reader:
        assert reader.load_model("m", allow_pickle=True) == WEIGHTS
    # Inside the SQLite file's folder: recorded relative, read back as the same folder.
    for name in ("s3::x", "a::b"):
        with Registry(f"sqlite:///{tmp_path / name}.db", str(tmp_path / name)) as reg:
            assert reg.artifacts.protocol == "file" and reg.artifacts.root == str(tmp_path / name)
        with Registry(f"sqlite:///{tmp_path / name}.db", create=False) as reader:
            assert reader.recorded_artifacts == str(tmp_path / name)


@pytest.mark.parametrize(
    ("location", "says"),
    [
        ("s3:models/x", "write s3://models/x for that store, or ./s3:models/x for a local"),
        ("memory:store", "write memory://store"),
        ("s3://bucket/a::b", "fsspec reads '::' as a link of a chain of filesystems"),
        ("simplecache::s3://bucket/a::b", "chain only with protocol prefixes"),
    ],
)
def test_a_location_fsspec_would_not_use_as_written_is_refused(tmp_path, location, says):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    with pytest.raises(ArtifactLocationError, match=says.replace("(", r"\(")) as info:
        Registry(url, location)
    assert info.value.param == "artifacts" and repr(location) in str(info.value)
    with pytest.raises(ArtifactLocationError, match="that store"):
        ArtifactStore("s3:models/x")
    with Registry(url, str(tmp_path / "ok")) as reg:  # nothing was recorded
        assert reg.recorded_artifacts == str(tmp_path / "ok")


def test_protocol_chains_and_plain_paths():
    assert location_protocols("simplecache::s3://bucket/x") == ["simplecache", "s3"]
    assert location_protocols("s3://bucket/x") == ["s3"]
    for plain in ("/data/a::b/store", "models::v2", "./s3:models/x", "col:on", "/tmp/a::s3://x"):
        assert location_protocols(plain) == []
        check_location(plain)
    check_location("simplecache::s3://bucket/x")
    check_location("file:/tmp/x")


# -- fix 5: stores that can only be read -------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["http://127.0.0.1:1/x", "https://example.com/m", "zip://foo", "github://a:b@/"]
)
def test_a_read_only_fsspec_store_is_refused_at_open(tmp_path, location):
    """Probe: http:// gave a bare NotImplementedError at register_model, zip:// an
    IsADirectoryError."""
    with pytest.raises(ArtifactLocationError, match="can only be read") as info:
        Registry(f"sqlite:///{tmp_path / 'r.db'}", location)
    assert info.value.param == "artifacts" and "\n" not in str(info.value)
    with pytest.raises(ArtifactLocationError, match="can only be read"):
        ArtifactStore(location)
    with pytest.raises(ArtifactLocationError, match="can only be read"):
        check_location(location)  # names only: nothing imported or contacted


def test_storage_options_reach_the_out_of_fold_predictions(
    moto_endpoint, no_s3_environment, client
):
    """The workers wrote a search's out-of-fold predictions to the registry's store, and
    ensemble selection read them back, without the registry's storage options: an S3
    store that only the options point at failed (the probe's left-alone item)."""
    from sklearn.datasets import make_classification
    from sklearn.linear_model import LogisticRegression

    from dmlsearch import SearchCV
    from dmlsearch.ensemble import EnsembleSelection

    options = {"endpoint_url": moto_endpoint, "key": "k", "secret": SECRET}
    X, y = make_classification(n_samples=120, random_state=0)
    with Registry("sqlite://", "s3://models/oof", storage_options=options) as reg:
        search = SearchCV(
            LogisticRegression(),
            {"C": [0.01, 1.0, 100.0]},
            strategy="grid",
            cv=3,
            keep_oof=True,
            registry=reg,
            experiment_name="oof-s3",
            client=client,
        ).fit(X, y)
        assert search.oof_predictions(search.trials_[0].number).shape == (120, 2)
        assert SECRET not in repr(search._oof_sink)
        for source, registry in ((search, None), ("oof-s3", reg)):
            ens = EnsembleSelection(source, 5, registry=registry, random_state=0).fit(X, y)
            assert ens.predict_proba(X).shape == (120, 2)
