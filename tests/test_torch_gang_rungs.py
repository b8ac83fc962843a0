"""SearchCV(scheduler=..., workers_per_trial=k): data-parallel torch trials with epochs as
the multi-fidelity budget; a promoted trial's folds continue on a gang."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from distributed import Client
from sklearn.base import clone
from sklearn.metrics import log_loss
from sklearn.model_selection import KFold
from test_torch_gang_trials import MLP

from dmlsearch import Float, SearchCV
from dmlsearch.runner.gang_rungs import GangRungSteps
from dmlsearch.training import TorchClassifier

pytestmark = pytest.mark.cluster

N, K = 240, 2


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, 4))
    return X, np.where(X[:, 0] * X[:, 1] > 0, "same", "other")


def net() -> TorchClassifier:
    # Shuffled batches and momentum: a continued fold equals a fit of all its epochs at
    # once only if the seeds and the optimizer state carried over.
    return TorchClassifier(
        MLP, optimizer=torch.optim.SGD, optimizer__momentum=0.9, batch_size=32,
        iterator_train__shuffle=True, random_state=0,
    )  # fmt: skip


def test_promoted_trials_continue_their_folds_and_equal_fits_at_their_epochs(
    client: Client, data: tuple[np.ndarray, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = data
    released: list[list[int] | None] = []
    release = GangRungSteps.release

    def recorded(self: GangRungSteps, trials: list[int] | None = None) -> None:
        released.append(None if trials is None else list(trials))
        release(self, trials)

    monkeypatch.setattr(GangRungSteps, "release", recorded)
    cv = KFold(2, shuffle=True, random_state=0)
    search = SearchCV(
        net(), {"lr": Float(0.01, 0.3, log=True)}, scheduler="halving",
        resource="max_epochs", min_resource=1, max_resource=9, reduction_factor=3,
        n_trials=9, cv=cv, scoring="neg_log_loss", workers_per_trial=K, client=client,
        random_state=0, progress=False,
    ).fit(X, y)  # fmt: skip
    r = search.cv_results_
    assert sorted(set(r["n_resources"])) == [1, 3, 9]
    assert list(r["n_resources"]).count(1) == 9 and list(r["n_resources"]).count(9) == 1
    assert all("+" in step.worker for step in search.trials_)  # every step on a gang of two
    promoted = [i for i, n in enumerate(r["n_resources"]) if n > 1]
    assert promoted and all(r["continued"][i] for i in promoted)
    assert all(r["work"][i] == r["n_resources"][i] // 3 * 2 for i in promoted)
    # Each trial's nets are dropped once it will not go on (the top one's after its last
    # step), as the search goes, not only at its end.
    during = {t for trials in released[:-1] if trials for t in trials}
    assert released[-1] is None and during == set(r["trial"])
    # Training work: each trial's epochs across rungs are the epochs of its highest rung.
    for trial in set(r["trial"]):
        rows = [i for i, t in enumerate(r["trial"]) if t == trial]
        assert sum(r["work"][i] for i in rows) == max(r["n_resources"][i] for i in rows)
    # A continued fold is the fold fitted data-parallel for all its epochs at once.
    splits = list(cv.split(X))
    for i in promoted:
        for f, (train, test) in enumerate(splits):
            # The row's params hold its resource, max_epochs, as scikit-learn's Halving.
            assert r["params"][i]["max_epochs"] == r["n_resources"][i]
            once = clone(net()).set_params(
                **r["params"][i], trainer__n_workers=K, trainer__client=client,
            ).fit(X[train], y[train])  # fmt: skip
            expected = -log_loss(y[test], once.predict_proba(X[test]), labels=once.classes_)
            assert r[f"split{f}_test_score"][i] == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert search.best_resource_ == 9
    assert search.best_estimator_.max_epochs == 9 and len(search.best_estimator_.history) == 9


def test_asha_on_gangs_runs_every_trial_and_holds_no_state_after(
    client: Client, data: tuple[np.ndarray, np.ndarray]
) -> None:
    X, y = data
    search = SearchCV(
        net(), {"lr": Float(0.01, 0.3, log=True)}, scheduler="asha", resource="max_epochs",
        min_resource=1, max_resource=3, n_trials=5, cv=2, workers_per_trial=K,
        client=client, random_state=1, progress=False, refit=False,
    ).fit(X, y)  # fmt: skip
    r = search.cv_results_
    assert sorted(set(r["trial"])) == [0, 1, 2, 3, 4]
    assert all(step.state == "complete" for step in search.trials_), [
        step.error for step in search.trials_
    ]
    assert search.runner_stats_.recorded == len(r["trial"])
