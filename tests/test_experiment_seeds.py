"""Seeds through the experiment-file path: every seed ``validate`` accepts must run."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from distributed import Client

from dmlsearch import Registry
from dmlsearch.config import parse_config, run_experiment

pytestmark = pytest.mark.cluster


def experiment(address: str, url: str, random_state: Any, strategy: str) -> str:
    data = {
        "version": 1,
        "name": "seeded",
        "data": {"dataset": "sklearn:load_iris"},
        "model": {"class": "sklearn.linear_model.LogisticRegression", "params": {"max_iter": 300}},
        "search": {
            "space": {
                "C": {"type": "float", "low": 1e-2, "high": 10.0, "log": True},
                "fit_intercept": [True, False],
            },
            "strategy": strategy,
            "n_trials": 2,
            "cv": 2,
        },
        "cluster": {"address": address},
        "registry": {"url": url},
    }
    if random_state != "absent":
        data["search"]["random_state"] = random_state
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize(
    ("strategy", "random_state"),
    [("tpe", 5_000_000_000), ("cmaes", 2**63 + 1), ("nsga2", None), ("tpe", "absent")],
)
def test_experiment_file_runs_with_any_accepted_seed(
    client: Client, tmp_path: Any, strategy: str, random_state: Any
) -> None:
    url = f"sqlite:///{tmp_path / 'reg.db'}"
    cfg = parse_config(experiment(client.scheduler.address, url, random_state, strategy))
    search = run_experiment(cfg, progress=False)
    assert len(search.trials_) == 2
    if isinstance(random_state, int):
        assert search.seed_ == random_state
    with Registry(url) as registry:
        exp = registry.experiment("seeded")
        assert exp.status == "complete" and exp.config["seed"] == search.seed_
    # The recorded seed comes back on resume: the search continues where it stopped.
    more = parse_config(
        experiment(client.scheduler.address, url, random_state, strategy),
        overrides=["search.n_trials=3"],
    )
    resumed = run_experiment(more, resume=True, progress=False)
    assert [t.number for t in resumed.trials_] == [0, 1, 2]
    assert resumed.seed_ == search.seed_
