"""A torch net written in an experiment file: its module, criterion and optimizer given as
classes with their arguments, so that the net seeds the weights and a search can name them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from dmlsearch.config import ConfigError, build_model, parse_config

MODULE = """
import torch


class MLP(torch.nn.Module):
    def __init__(self, n_in=4, hidden=8, n_out=2):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_out)
        )

    def forward(self, x):
        return self.net(x)
"""


@pytest.fixture
def mods(tmp_path: Path) -> str:
    """The name of a fresh module beside the experiment file, holding ``MLP``."""
    name = f"mods_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(MODULE)
    return name


def experiment(net: dict[str, Any], *, ensemble: bool = False, space: Any = None) -> str:
    doc: dict[str, Any] = {
        "version": 1,
        "name": "torch-model",
        "data": {"dataset": "sklearn:load_iris"},
        "model": {
            "steps": {
                "scale": "sklearn.preprocessing.StandardScaler",
                "net": {"class": "dmlsearch.training.TorchClassifier", "params": net},
            }
        },
        "search": {"n_trials": 2, "cv": 2, "space": space or {"net__lr": [0.01, 0.1]}},
    }
    if ensemble:
        doc["ensemble"] = {"kind": "selection", "size": 3}
    return yaml.safe_dump(doc, sort_keys=False)


def problems(text: str, base_dir: Path) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=base_dir)
    return {p.path: p.message for p in info.value.problems}


def test_a_module_spec_becomes_the_class_and_its_arguments(tmp_path: Path, mods: str) -> None:
    text = experiment(
        {
            "module": {"class": f"{mods}:MLP", "params": {"hidden": 5, "n_out": 3}},
            "criterion": "CrossEntropyLoss",
            "optimizer": {"class": "SGD", "params": {"momentum": 0.9}},
            "random_state": 0,
        },
        space={"net__module__hidden": [3, 5]},
    )
    net = build_model(parse_config(text, base_dir=tmp_path)).named_steps["net"]
    assert isinstance(net.module, type) and net.module.__name__ == "MLP"
    assert (net.module__hidden, net.module__n_out) == (5, 3)
    assert net.criterion is torch.nn.CrossEntropyLoss
    assert net.optimizer is torch.optim.SGD and net.optimizer__momentum == 0.9
    # The net builds the module, so its weights come from random_state: equal each time
    # (an instance built from the file kept whatever the process's generator gave it).
    weights = []
    for _ in range(2):
        fresh = build_model(parse_config(text, base_dir=tmp_path)).named_steps["net"]
        fresh.initialize()
        weights.append(fresh.module_.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert weights[0]["net.0.weight"].shape == (5, 4)


def test_a_module_given_as_an_import_path_is_the_class(tmp_path: Path, mods: str) -> None:
    net = build_model(
        parse_config(experiment({"module": f"{mods}.MLP"}), base_dir=tmp_path)
    ).named_steps["net"]
    assert isinstance(net.module, type) and net.module.__name__ == "MLP"


def test_a_bad_module_spec_is_refused_with_its_path(tmp_path: Path, mods: str) -> None:
    where = "model.steps.net.params"
    found = problems(
        experiment({"module": {"class": f"{mods}:MLP", "params": {"hiden": 4}}}), tmp_path
    )
    assert "did you mean 'hidden'" in found[f"{where}.module.params.hiden"]
    found = problems(experiment({"module": "sklearn.svm.SVC"}), tmp_path)
    assert "not a torch.nn.Module class" in found[f"{where}.module"]
    found = problems(
        experiment(
            {"module": {"class": f"{mods}:MLP", "params": {"hidden": 4}}, "module__hidden": 6}
        ),
        tmp_path,
    )
    assert "given twice" in found[f"{where}.module__hidden"]
    found = problems(experiment({"module": f"{mods}:MLP", "optimizer": "Adamm"}), tmp_path)
    assert "did you mean 'Adam'" in found[f"{where}.optimizer"]


def test_an_ensemble_of_pipelines_holding_a_net_is_refused_before_any_work(
    tmp_path: Path, mods: str
) -> None:
    # Such members have no safe format: the search ran, then the ensemble was lost.
    found = problems(experiment({"module": f"{mods}:MLP"}, ensemble=True), tmp_path)
    assert "make the net itself the model" in found["ensemble"]
