"""Experiment files with a ``train:`` section: validation before any work, and the builder."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmlsearch.config import (
    ConfigError,
    build_search,
    build_trainer,
    load_config,
    parse_config,
    run_experiment,
    run_training,
    summary,
)

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

# A valid training job, as a dict: the base every malformed example below mutates.
VALID: dict[str, Any] = {
    "version": 1,
    "name": "job",
    "data": {"dataset": "sklearn:load_iris"},
    "train": {
        "model": {
            "function": "torch.nn:Linear",
            "kwargs": {"in_features": 4, "out_features": 3},
        },
        "loss": "cross_entropy",
        "optimizer": {"class": "SGD", "lr": 0.1},
        "epochs": 2,
        "batch_size": 8,
    },
}


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def problems(data: Any) -> dict[str, Any]:
    """Validate ``data`` expecting a ConfigError; returns {path: problem}."""
    with pytest.raises(ConfigError) as info:
        parse_config(dump(data))
    return {p.path: p for p in info.value.problems}


def with_train(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is None:
            data["train"].pop(key, None)
        else:
            data["train"][key] = value
    return data


def test_the_example_validates_and_builds_a_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a registry would be created
    cfg = load_config(EXPERIMENTS / "train_mlp.yaml")
    assert cfg.kind == "train" and cfg.model is None and cfg.search is None
    trainer = build_trainer(cfg)
    assert (trainer.epochs, trainer.batch_size, trainer.sync, trainer.n_workers) == (
        10,
        50,
        "allreduce",
        2,
    )
    assert trainer.model_name == "mlp-blobs" and trainer.experiment_name == "mlp-blobs"
    module = trainer.model_fn()
    assert [p.shape[0] for p in module.parameters()] == [64, 64, 3, 3]
    optimizer = trainer.optimizer_fn(module.parameters())
    assert type(optimizer).__name__ == "SGD" and optimizer.defaults["momentum"] == 0.9
    outline = summary(cfg)
    assert outline["kind"] == "train" and outline["model"] == "models:mlp"
    assert outline["train"]["loss"] == "cross_entropy" and outline["train"]["optimizer"] == "SGD"
    # A search's builders refuse it, naming what runs it.
    with pytest.raises(ConfigError, match="training job, not a search"):
        build_search(cfg)
    with pytest.raises(ConfigError, match="run_training"):
        run_experiment(cfg)  # before it opens a registry or starts a cluster
    with pytest.raises(ConfigError, match="run_experiment"):
        run_training(load_config(EXPERIMENTS / "quickstart.yaml"))
    assert list(tmp_path.iterdir()) == []


def test_the_other_spellings_of_model_loss_and_optimizer() -> None:
    import torch

    cfg = parse_config(
        dump(
            with_train(
                model="torch.nn:PReLU",
                loss={"function": "torch.nn.CrossEntropyLoss", "kwargs": {"label_smoothing": 0.1}},
                optimizer={"class": "torch.optim.Adam", "params": {"lr": 1e-3}},
                sync="average",
                average_every=4,
            )
        )
    )
    trainer = build_trainer(cfg)
    assert isinstance(trainer.model_fn(), torch.nn.PReLU)
    logits, target = torch.zeros(2, 3), torch.tensor([0, 1])
    assert float(trainer.loss_fn(logits, target)) == pytest.approx(
        float(torch.log(torch.tensor(3.0)))
    )
    optimizer = trainer.optimizer_fn(torch.nn.Linear(2, 2).parameters())
    assert isinstance(optimizer, torch.optim.Adam) and trainer.average_every == 4
    pinned = parse_config(dump(with_train(device="cpu", backend="gloo"))).train
    assert pinned is not None
    assert (pinned.trainer_kwargs()["device"], pinned.trainer_kwargs()["backend"]) == (
        "cpu",
        "gloo",
    )
    assert parse_config(dump(with_train(optimizer="Adam"))).train is not None


@pytest.mark.parametrize(
    ("changes", "path", "text"),
    [
        ({"model": "mlp"}, "train.model", "expected an import path module:function"),
        ({"model": "torch.nn:Lineer"}, "train.model", "did you mean 'Linear'"),
        ({"model": "torch.nn.functional:relu"}, "train.model", "missing a required argument"),
        (
            {"model": {"function": "torch.nn:Linear", "kwargs": {"in_featurs": 4}}},
            "train.model.kwargs.in_featurs",
            "did you mean 'in_features'",
        ),
        (
            {
                "model": {
                    "function": "torch.nn:Linear",
                    "kwargs": {"in_features": -1, "out_features": 2},
                }
            },
            "train.model.function",
            "Linear(...) failed: RuntimeError",
        ),
        ({"model": "builtins:dict"}, "train.model", "must return a torch.nn.Module"),
        (
            {"model": {"function": "torch.nn:Identity", "args": [1]}},
            "train.model.args",
            "unknown key",
        ),
        ({"loss": "cross_entropie"}, "train.loss", "did you mean 'cross_entropy'"),
        ({"loss": None}, "train.loss", "required key 'loss' is missing"),
        (
            {"loss": {"function": "mse_loss", "kwargs": {"reduce_it": True}}},
            "train.loss.kwargs.reduce_it",
            "has no parameter",
        ),
        ({"optimizer": {"class": "SDG", "lr": 0.1}}, "train.optimizer.class", "did you mean 'SGD'"),
        ({"optimizer": {"class": "SGD", "lr": -1}}, "train.optimizer", "Invalid learning rate"),
        (
            {"optimizer": {"class": "SGD", "lr": 0.1, "momentun": 0.9}},
            "train.optimizer.momentun",
            "did you mean 'momentum'",
        ),
        (
            {"optimizer": {"class": "SGD", "lr": 0.1, "params": {"momentum": 0.9}}},
            "train.optimizer.params",
            "not both",
        ),
        ({"optimizer": {"class": "collections:OrderedDict"}}, "train.optimizer.class", "not a"),
        ({"optimizer": [1]}, "train.optimizer", "expected an optimizer"),
        ({"epochs": 0}, "train.epochs", "expected an integer > 0"),
        ({"batch_size": True}, "train.batch_size", "expected an integer"),
        ({"sync": "allreduse"}, "train.sync", "did you mean 'allreduce'"),
        ({"staleness": 2}, "train.staleness", "only used with sync: ssp"),
        ({"average_every": 3}, "train.average_every", "only used with sync: average"),
        ({"sync": "ssp", "staleness": -1}, "train.staleness", "expected an integer >= 0"),
        ({"checkpoint_every": 0}, "train.checkpoint_every", "expected an integer > 0"),
        ({"shuffle": "yes"}, "train.shuffle", "expected true or false"),
        ({"timeout": "soon"}, "train.timeout", "expected seconds"),
        ({"model_name": " "}, "train.model_name", "non-empty"),
        ({"model_name": "a@b"}, "train.model_name", "must not contain '@'"),
        ({"model_name": "a\nb"}, "train.model_name", "control characters"),
        ({"n_workrs": 2}, "train.n_workrs", "did you mean 'n_workers'"),
        ({"device": "gpu"}, "train.device", "expected 'auto', 'cpu' or 'cuda'"),
        ({"backend": "mpi"}, "train.backend", "expected 'auto', 'gloo' or 'nccl'"),
    ],
)
def test_a_bad_train_section_names_the_field(changes: dict[str, Any], path: str, text: str) -> None:
    found = problems(with_train(**changes))
    assert path in found, (path, found)
    assert text in found[path].message, found[path].message


def test_every_problem_of_a_train_section_at_once_with_its_line() -> None:
    text = dump(with_train(loss="cross_entropie", epochs=-1, sync="avg"))
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="job.yaml")
    paths = {p.path: p.line for p in info.value.problems}
    assert set(paths) == {"train.loss", "train.epochs", "train.sync"}, str(info.value)
    assert all(line is not None for line in paths.values())


def test_a_file_has_a_search_or_a_training_job() -> None:
    both = copy.deepcopy(VALID)
    both["model"] = "sklearn.svm.SVC"
    both["search"] = {"space": {"C": [1.0]}}
    assert "not both" in problems(both)["train"].message
    neither = {k: v for k, v in VALID.items() if k != "train"}
    found = problems(neither)
    for key in ("model", "search"):
        assert f"required key {key!r} is missing" in found[key].message
        assert "or a training job (train)" in found[key].message
    with_scheduler = copy.deepcopy(VALID)
    with_scheduler["scheduler"] = {"kind": "asha", "resource": "partial_fit", "max_resource": 9}
    assert "only used with a search" in problems(with_scheduler)["scheduler"].message
    small = copy.deepcopy(VALID)
    small["cluster"] = {"local": {"n_workers": 1}}
    assert "use at most 1" in problems(small)["train.n_workers"].message


def test_overrides_reach_the_train_section() -> None:
    cfg = parse_config(dump(VALID), overrides=["train.epochs=7", "train.sync=ssp"])
    assert cfg.train is not None and (cfg.train.epochs, cfg.train.sync) == (7, "ssp")
    with pytest.raises(ConfigError, match=r"train.epochs: expected an integer > 0.*from --set"):
        parse_config(dump(VALID), overrides=["train.epochs=0"])


def test_a_model_module_beside_the_file_travels_by_value(tmp_path: Path) -> None:
    """The workers need not import a model module that sits beside the experiment file."""
    name = f"beside_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import torch\n\n\ndef net(width=3):\n    return torch.nn.Linear(4, width)\n"
    )
    data = with_train(model={"function": f"{name}:net", "kwargs": {"width": 3}})
    (tmp_path / "job.yaml").write_text(dump(data))
    trainer = build_trainer(load_config(tmp_path / "job.yaml"))
    blob = pickle.dumps(trainer.model_fn)
    # Unpickled in a process that cannot import the module: the function came by value.
    code = (
        "import pickle, sys\n"
        f"assert {name!r} not in sys.modules\n"
        "fn = pickle.loads(sys.stdin.buffer.read())\n"
        "print(fn().out_features)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, check=True, cwd="/"
    )
    assert out.stdout.decode().strip() == "3"


def test_loading_a_search_file_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import dmlsearch\n"
        "from dmlsearch.config import load_config\n"
        f"load_config({str(EXPERIMENTS / 'quickstart.yaml')!r})\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_sync_names_are_the_trainers() -> None:
    from dmlsearch.config._train import SYNC_NAMES
    from dmlsearch.training import SYNCS

    assert SYNC_NAMES == SYNCS
