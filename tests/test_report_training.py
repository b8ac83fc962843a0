"""The HTML report of a training job: settings, versions, the epoch table and its plots."""

from __future__ import annotations

import base64
import functools
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from distributed import Client
from sklearn.dummy import DummyRegressor

from dmlsearch.exceptions import TrainingError
from dmlsearch.registry import Registry
from dmlsearch.report import TRAINING_FIGURES, report_figures, write_report
from dmlsearch.report._common import _text
from dmlsearch.training import DataParallelTrainer

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PNG = b"\x89PNG\r\n\x1a\n"
SEARCH_ONLY = ["Leaderboard", "Optimisation history", "Parallel coordinates", "Failed trials"]


def loss_failing_in_ranks(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The loss of the driver's trial batch; raises in a rank (its process group is up)."""
    if torch.distributed.is_initialized():
        raise RuntimeError("a bug in the loss")
    return torch.nn.functional.mse_loss(out, target)


class _Page(HTMLParser):
    """The h2 headings, each section's tables (rows of cell texts) and the images."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.sections: dict[str, list[list[list[str]]]] = {}
        self.images: dict[str, bytes] = {}
        self._heading = ""
        self._tag = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag == "table":
            self.sections[self._heading].append([])
        elif tag == "tr":
            self.sections[self._heading][-1].append([])
        elif tag == "img":
            src = dict(attrs)["src"] or ""
            assert src.startswith("data:image/png;base64,")
            self.images[self._heading] = base64.b64decode(src.split(",", 1)[1], validate=True)

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""

    def handle_data(self, data: str) -> None:
        if self._tag == "h2":
            self._heading = data
            self.sections[data] = []
        elif self._tag in ("td", "th"):
            self.sections[self._heading][-1][-1].append(data)

    def rows(self, heading: str, table: int = 0) -> list[list[str]]:
        """The body rows of a section's table (the header left out)."""
        return self.sections[heading][table][1:]

    def field(self, heading: str, name: str) -> list[str]:
        """The other cells of the row of ``name`` in a section's first table."""
        return next(r[1:] for r in self.rows(heading) if r[0] == name)


def _read(path: Path) -> tuple[_Page, str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    return _Page(text), text


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry(f"sqlite:///{tmp_path / 'r.db'}", artifacts=str(tmp_path / "a")) as reg:
        yield reg


def _trainer(client: Client, registry: Registry, **kwargs: Any) -> DataParallelTrainer:
    params: dict[str, Any] = {
        "model_fn": functools.partial(torch.nn.Linear, 4, 1),
        "loss_fn": torch.nn.functional.mse_loss,
        "optimizer_fn": functools.partial(torch.optim.SGD, lr=0.05),
        "epochs": 3,
        "batch_size": 10,
        "random_state": 0,
        "client": client,
        "device": "cpu",
        "registry": registry,
    }
    return DataParallelTrainer(**{**params, **kwargs})


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4)).astype(np.float32)
    return X, (X @ rng.normal(size=(4, 1))).astype(np.float32)  # 2-D, as Linear's output


@pytest.mark.cluster
def test_report_of_a_trained_job_and_of_a_failed_one(
    client: Client, registry: Registry, tmp_path: Path
) -> None:
    X, y = _data()
    fitted = _trainer(
        client, registry, sync="average", average_every=2, experiment_name="job", model_name="mlp"
    ).fit(X, y)
    fitted.register()  # a second version from the same job
    history = fitted.history_
    assert [e["epoch"] for e in history] == [1, 2, 3]

    page, text = _read(write_report(registry, "job", tmp_path / "job.html"))
    assert list(page.sections) == [
        "Summary",
        "Training",
        "Model versions",
        "Epochs",
        *TRAINING_FIGURES.values(),
        "Configuration",
        "Package versions",
    ]
    assert "<h1>Training job job</h1>" in text
    assert page.field("Summary", "status") == ["complete (trained every epoch)"]
    assert page.field("Summary", "model versions") == ["2"]
    assert page.field("Summary", "final loss") == [_text(history[-1]["loss"])]
    # Asked (the job's config) and as run (the version's lineage), side by side.
    training = page.field
    assert training("Training", "sync") == ["average (parameters averaged every 2 steps)"] * 2
    assert training("Training", "workers (world size)") == ["2", "2"]
    assert training("Training", "epochs") == ["3", "3"]
    assert training("Training", "batch size per rank") == ["10", "10"]
    assert training("Training", "global batch (all ranks)") == ["-", "20"]
    assert training("Training", "device") == ["cpu", "cpu"]
    assert training("Training", "backend") == ["auto", fitted.backend_]
    assert training("Training", "elastic / resumes") == ["False", "none"]
    assert training("Training", "checkpoint_every / last checkpoint") == [
        "1",
        f"epoch 3 (sha256 {fitted.checkpoint_.sha256[:12]})",
    ]
    versions = page.rows("Model versions")
    assert [(r[0], r[1]) for r in versions] == [("mlp", "1"), ("mlp", "2")]
    assert all(r[3] == _text(history[-1]["loss"]) for r in versions)
    # The epoch table is the history, row for row.
    header = page.sections["Epochs"][0][0]
    assert header == ["epoch", "loss", "seconds", "samples/s", "sync (s)", "sync rounds"]
    keys = ["epoch", "loss", "seconds", "samples_per_s", "sync_s", "sync_rounds"]
    assert page.rows("Epochs") == [[_text(e[k]) for k in keys] for e in history]
    for title in TRAINING_FIGURES.values():
        assert page.images[title].startswith(PNG) and len(page.images[title]) > 1024
    assert not set(SEARCH_ONLY) & set(page.sections)
    figures = report_figures(registry, "job")
    assert list(figures) == list(TRAINING_FIGURES)
    assert all(png.startswith(PNG) for png in figures.values())

    # A job that failed registered nothing: the report says so, and shows no epochs.
    with pytest.raises(TrainingError):
        _trainer(client, registry, loss_fn=loss_failing_in_ranks, experiment_name="broken").fit(
            X, y
        )
    page, text = _read(write_report(registry, "broken", tmp_path / "broken.html"))
    assert page.field("Summary", "status")[0].startswith("failed (ended with an error:")
    assert page.field("Summary", "model versions") == ["0"]
    assert "No model version in this registry was registered from this job: it failed" in text
    assert "No checkpoint is recorded: <code>dmlsearch resume FILE</code> would train" in text
    assert page.sections["Model versions"] == [] and page.images == {}
    assert page.sections["Epochs"] == [] and "No epochs recorded (no model version)." in text
    assert page.field("Training", "epochs") == ["3", "(no version)"]
    assert report_figures(registry, "broken") == {}

    # Neither the report nor `dmlsearch show` imports torch: a reader may not have it.
    code = textwrap.dedent(
        f"""
        import sys
        from typer.testing import CliRunner
        from dmlsearch.cli import app
        from dmlsearch.registry import Registry
        from dmlsearch.report import write_report
        with Registry({registry.url!r}) as reg:
            for name in ("job", "broken"):
                write_report(reg, name, {str(tmp_path)!r} + "/" + name + "-again.html")
        shown = CliRunner().invoke(app, ["show", "broken", "--registry", {registry.url!r}])
        assert "(id 2, failed): training job of Linear" in shown.stdout, shown.output
        assert "no model registered from it" in shown.stdout, shown.output
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (tmp_path / "job-again.html").read_text().count("<img") == len(TRAINING_FIGURES)


def test_elastic_resumes_are_listed_and_marked(registry: Registry, tmp_path: Path) -> None:
    # A job as an elastic fit that lost a worker records it: one resume after epoch 2.
    exp = registry.store.create_experiment(
        "elastic",
        config={"kind": "train", "sync": "ssp", "staleness": None, "epochs": 4, "n_workers": 2},
    )
    history = [
        {"epoch": i, "loss": 1.0 / i, "seconds": 0.5, "samples_per_s": 400.0 - 150 * (i > 2)}
        | {"sync_s": 0.1, "sync_rounds": 5, "max_lag": 1}
        for i in range(1, 5)
    ]
    resumed = [{"epoch": 2, "worker": "tcp://10.0.0.2:4000", "n_workers": 1}]
    lineage = {"sync": "ssp", "staleness": None, "world_size": 1, "history": history}
    registry.register_model(
        "m",
        DummyRegressor().fit([[0]], [0]),
        experiment=exp.id,
        lineage=lineage | {"resumed": resumed},
    )
    registry.store.set_experiment_status(exp.id, "complete")
    page, text = _read(write_report(registry, "elastic", tmp_path / "e.html"))
    assert page.field("Training", "sync") == ["ssp (no staleness bound: fully asynchronous)"] * 2
    assert page.field("Training", "elastic / resumes") == [
        "-",
        "after epoch 2: worker tcp://10.0.0.2:4000 lost, 1 worker(s) after",
    ]
    assert page.sections["Epochs"][0][0][-1] == "max lag (ssp)"
    assert "Dashed: the 1 resume(s)" in text
    assert page.field("Summary", "time in sync (s)") == ["0.4 (20.0% of it)"]
