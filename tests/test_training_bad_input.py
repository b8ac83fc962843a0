"""Bad input to the training API (docs/training.md, "Errors"): what a new user may pass to
``DataParallelTrainer`` and ``TorchClassifier`` / ``TorchRegressor`` either trains (and
then correctly) or raises dmlsearch's own error naming what to change, before any rank
starts. A raw ``RuntimeError`` from torch, a ``TypeError`` from NumPy or skorch, a rank's
``TrainingError`` for what the driver could have seen, or a silent NaN model fails.

The properties and the first cases need no cluster (the driver's checks, ``_prepare``,
and one-process estimator fits); the rest share one 2-worker process cluster.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import torch
from distributed import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_torch_gang_trials import MLP  # n_in=4 (D), hidden=8, n_out=2

from dmlsearch.exceptions import DmlsearchError, InvalidParameterError
from dmlsearch.testing import local_cluster
from dmlsearch.training import DataParallelTrainer, TorchClassifier, TorchRegressor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EXAMPLES = settings(
    max_examples=int(os.environ.get("DMLSEARCH_BAD_INPUT_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
N, D = 64, 4
RNG = np.random.default_rng(0)
X = RNG.normal(size=(N, D)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64)
YR = X[:, 1].copy()


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(D, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def ce(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(out, target)


def mse_1d(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out.squeeze(-1), target)


def any_shape() -> torch.nn.Module:
    """Takes rows of any shape and dtype it can be trained on."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(1))


def mean_output(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return out.mean() + 0 * target.float().mean()


class NeedsWidth(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(D, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class NoParameters(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :2]


def trainer(**kwargs: Any) -> DataParallelTrainer:
    params: dict[str, Any] = {
        "model_fn": mlp,
        "loss_fn": ce,
        "optimizer_fn": sgd,
        "epochs": 2,
        "batch_size": 8,
        "n_workers": 2,
        "shuffle": False,
        "random_state": 0,
        "checkpoint_every": None,
        "timeout": 30.0,
        "device": "cpu",
    }
    return DataParallelTrainer(**{**params, **kwargs})


def prepared(t: DataParallelTrainer, X: Any, y: Any) -> tuple[Any, ...]:
    """The driver's checks of ``fit`` (everything before a cluster is asked for)."""
    return t._prepare(X, y, t.n_workers if isinstance(t.n_workers, int) else 2)


def refused_or_fine(call: Callable[[], Any]) -> DmlsearchError | None:
    try:
        call()
    except DmlsearchError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        assert isinstance(exc, (ValueError, TypeError)), type(exc)
        return exc
    return None


# -- properties: odd values and odd arrays, no cluster -----------------------------------------

odd = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(
        ["AllReduce", "ALLREDUCE", " average", "ssp", "3", np.int64(2), np.bool_(True)]
    ),
    st.just([1, 2]),
    st.just(np.random.RandomState(0)),
)
INT_PARAMS = {"epochs": 1, "batch_size": 1, "n_workers": 1, "average_every": 1}


@EXAMPLES
@given(
    name=st.sampled_from(
        [
            *INT_PARAMS,
            "checkpoint_every",
            "random_state",
            "sync",
            "timeout",
            "elastic",
            "shuffle",
            "staleness",
        ]
    ),
    value=odd,
)
def test_an_odd_parameter_is_taken_or_refused_by_name(name: str, value: Any) -> None:
    t = trainer(**{name: value, "batch_size": value if name == "batch_size" else 2})
    exc = refused_or_fine(lambda: prepared(t, X, Y))
    if exc is None:
        if name in INT_PARAMS:  # taken: an int, not a bool, large enough
            assert isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            assert value >= INT_PARAMS[name]
        if name == "sync":
            assert value in ("allreduce", "average", "ssp")
        if name == "timeout":
            assert 0 < float(value) < 1e14 and not isinstance(value, bool)
    else:
        assert isinstance(exc, InvalidParameterError)
        assert exc.param in (name, "batch_size"), exc


dtypes = st.sampled_from(
    [
        "float16",
        "float32",
        "float64",
        "int8",
        "int64",
        "uint8",
        "bool",
        "complex64",
        "U3",
        "O",
        "datetime64[s]",
    ]
)


@st.composite
def arrays(draw: st.DrawFn, rows: int, min_dims: int) -> np.ndarray:
    dtype = np.dtype(draw(dtypes))
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=3, min_side=1, max_side=3))
    if dtype.kind == "O":
        return np.asarray(
            draw(
                st.lists(
                    st.one_of(st.none(), st.floats(), st.text(max_size=2)),
                    min_size=rows,
                    max_size=rows,
                )
            ),
            dtype=object,
        )
    # Magnitudes that overflow float32 arithmetic in any model are a scaling question, not
    # bad input: the values stay within 1e4 (NaN and inf included).
    elements = None
    if dtype.kind == "f":
        elements = st.floats(-1e4, 1e4, width=min(64, 8 * dtype.itemsize)) | st.sampled_from(
            [np.nan, np.inf, -np.inf]
        )
    elif dtype.kind in "iu":
        elements = st.integers(0 if dtype.kind == "u" else -100, 100)
    return draw(hnp.arrays(dtype, (rows, *shape[1:]), elements=elements))


@EXAMPLES
@given(data=st.data())
def test_odd_arrays_train_or_are_refused_before_any_rank(data: st.DataObject) -> None:
    rows = data.draw(st.sampled_from([0, 16, 17]))
    Xd = data.draw(arrays(rows, 1))
    yd = data.draw(arrays(data.draw(st.sampled_from([rows, rows + 1])), 1))
    t = trainer(model_fn=any_shape, loss_fn=mean_output, batch_size=4)
    exc = refused_or_fine(lambda: prepared(t, Xd, yd))
    if exc is None:
        for a in (Xd, yd):  # what is taken is numeric, finite, and as many rows
            assert a.dtype.kind in "fiub" and len(a) == len(Xd) >= 8
            assert a.dtype.kind not in "f" or np.isfinite(a).all()
    else:
        assert isinstance(exc, InvalidParameterError) and exc.param in (
            "X",
            "y",
            "batch_size",
            "model_fn",
            "loss_fn",
        ), exc


@EXAMPLES
@given(data=st.data(), classifier=st.booleans())
def test_estimators_train_or_refuse_odd_arrays(data: st.DataObject, classifier: bool) -> None:
    rows = data.draw(st.sampled_from([0, 12]))
    Xd = data.draw(arrays(rows, 2))
    yd = data.draw(arrays(data.draw(st.sampled_from([rows, rows + 1])), 1))
    width = int(np.prod(Xd.shape[1:]))
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(width, 2))
    cls = TorchClassifier if classifier else TorchRegressor
    net = cls(module, max_epochs=1, batch_size=4, random_state=0)
    exc = refused_or_fine(lambda: net.fit(Xd, yd))
    if exc is None:
        loss = net.history[-1, "train_loss"]
        assert np.isfinite(loss), f"trained to a {loss} loss on {Xd!r}, {yd!r}"
    else:
        assert isinstance(exc, InvalidParameterError), exc


# -- the trainer's driver checks, no cluster ---------------------------------------------------


def raises() -> torch.nn.Module:
    raise RuntimeError("a bug in model_fn")


@pytest.mark.parametrize(
    ("params", "X", "y", "param", "match"),
    [
        ({}, X[:, 0], Y, "model_fn", r"X is 1-D .*reshape\(-1, 1\)"),
        ({}, np.where(X > 1, np.nan, X), Y, "X", "NaN or infinite"),
        ({}, np.where(X > 1, np.inf, X), Y, "X", "NaN or infinite"),
        ({}, np.where(X > 1, 1e300, X.astype(np.float64)), Y, "X", "beyond float32's range"),
        (
            {"model_fn": lambda: torch.nn.Linear(D, 1), "loss_fn": mse_1d},
            X,
            np.where(YR > 1, np.nan, YR),
            "y",
            "NaN or infinite",
        ),
        ({}, X, np.where(Y > 0, "a", "b"), "y", "must be numeric"),
        ({}, pd.DataFrame(X).assign(city="x"), Y, "X", "non-numeric columns 'city'"),
        ({}, scipy.sparse.csr_matrix(X), Y, "X", r"toarray\(\)"),
        ({}, np.ma.masked_array(X, X > 1), Y, "X", "masked"),
        ({}, None, Y, "X", "None"),
        ({}, X, Y[:10], "X", "same number of rows"),
        (
            {},
            da.from_array(X, chunks=16)[da.from_array(Y, chunks=16) >= 0],
            Y,
            "X",
            r"compute_chunk_sizes\(\)",
        ),
        ({}, X, pd.Series(np.where(Y > 0, "a", "b"), dtype="category"), "y", "dtype category"),
        ({}, X[:0], Y[:0], "batch_size", "0 rows"),
        ({"model_fn": raises}, X, Y, "model_fn", "RuntimeError: a bug in model_fn"),
        ({"model_fn": NoParameters}, X, Y, "model_fn", "no parameters to train"),
        ({"model_fn": lambda: mlp().requires_grad_(False)}, X, Y, "model_fn", "no parameters"),
        ({"optimizer_fn": lambda p: None}, X, Y, "optimizer_fn", "NoneType"),
        ({"optimizer_fn": lambda p: torch.optim.SGD(p, lr=-1)}, X, Y, "optimizer_fn", "-1"),
        (
            {"loss_fn": lambda o, t: torch.nn.functional.cross_entropy(o, t, reduction="none")},
            X,
            Y,
            "loss_fn",
            "one-element",
        ),
        ({"loss_fn": lambda o, t: 0.5}, X, Y, "loss_fn", "returned float"),
        ({"loss_fn": lambda o, t: torch.tensor(0.5)}, X, Y, "loss_fn", "does not depend"),
        ({"loss_fn": lambda o, t: o.sum() * float("nan")}, X, Y, "loss_fn", "is nan"),
        ({}, X, Y.astype(np.float32), "loss_fn", r"y \(shape \(8,\), dtype float32\)"),
        (
            {"model_fn": lambda: torch.nn.Linear(D, 1), "loss_fn": torch.nn.functional.mse_loss},
            X,
            YR,
            "loss_fn",
            "broadcasting",
        ),
        ({"sync": "AllReduce"}, X, Y, "sync", "did you mean 'allreduce'"),
        ({"sync": "ALLREDUCE"}, X, Y, "sync", "did you mean 'allreduce'"),
        ({"average_every": 3}, X, Y, "average_every", "set sync='average'"),
        ({"sync": "ssp", "average_every": 3}, X, Y, "average_every", "would ignore it"),
        ({"staleness": 2}, X, Y, "staleness", "set sync='ssp'"),
        ({"timeout": -1}, X, Y, "timeout", "finite seconds > 0"),
        ({"timeout": float("inf")}, X, Y, "timeout", "finite seconds > 0"),
        ({"timeout": True}, X, Y, "timeout", "finite seconds > 0"),
        ({"elastic": "yes"}, X, Y, "elastic", "True or False"),
        ({"epochs": "3"}, X, Y, "epochs", "int >= 1"),
        ({"epochs": 2**70}, X, Y, "epochs", "below 2\\*\\*63"),
        ({"model_name": "mlp@v1"}, X, Y, "model_name", "must not contain '@'"),
        ({"experiment_name": "job\n2"}, X, Y, "experiment_name", "control"),
        ({"batch_size": 2**63}, X, Y, "batch_size", "below 2\\*\\*63"),
        ({"batch_size": 8.0}, X, Y, "batch_size", "int >= 1"),
        ({"n_workers": True}, X, Y, "n_workers", "int >= 1"),
        ({"checkpoint_every": 0}, X, Y, "checkpoint_every", "int >= 1 or None"),
        ({"random_state": 1.5}, X, Y, "random_state", "RandomState"),
    ],
)
def test_the_driver_refuses_naming_what_to_change(
    params: dict[str, Any], X: Any, y: Any, param: str, match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=match) as caught:
        prepared(trainer(**params), X, y)
    assert caught.value.param == param


@pytest.mark.parametrize("start", [-1, 3, 7])
def test_a_continued_job_starts_within_its_epochs(start: int) -> None:
    # Checked before the gang is looked at (so None stands for it here).
    with pytest.raises(InvalidParameterError, match="below epochs=3") as caught:
        trainer(epochs=3).fit_on_gang(None, X, Y, start_epoch=start)  # type: ignore[arg-type]
    assert caught.value.param == "start_epoch"


@pytest.mark.parametrize(
    ("X", "model_fn", "x_dtype"),
    [
        (X.astype(np.float64), mlp, "float32"),
        (X.astype(np.float16), mlp, "float32"),
        (X.astype(np.float32), lambda: mlp().double(), "float64"),
        ((X * 10).astype(np.int64), mlp, "float32"),  # a Linear takes no int64: made float
        (X > 0, mlp, "float32"),
        (
            pd.DataFrame(X > 0).assign(n=pd.array([1] * N, dtype="Int64")).iloc[:, 1:],
            mlp,
            "float32",
        ),
        (
            RNG.integers(0, 10, size=(N, 3)),
            lambda: torch.nn.Sequential(
                torch.nn.Embedding(10, 2), torch.nn.Flatten(), torch.nn.Linear(6, 2)
            ),
            "",
        ),
    ],
)
def test_x_is_trained_as_the_dtype_the_model_takes(X: Any, model_fn: Any, x_dtype: str) -> None:
    t = trainer(model_fn=model_fn)
    prepared(t, X, Y)
    assert t._dtypes[0] == x_dtype  # "": int64, an Embedding's indices


# -- estimators, one process -------------------------------------------------------------------


def classifier(**kwargs: Any) -> TorchClassifier:
    return TorchClassifier(MLP, **{"max_epochs": 1, "batch_size": 16, "random_state": 0, **kwargs})


def regressor(**kwargs: Any) -> TorchRegressor:
    params = {"module__n_out": 1, "max_epochs": 1, "batch_size": 16, "random_state": 0}
    return TorchRegressor(MLP, **{**params, **kwargs})


#: (estimator, X, y, param, match): refused in one process and data-parallel alike.
ESTIMATOR_CASES = [
    (classifier, X, np.zeros(N, int), "y", "one class"),
    (classifier, X, np.arange(N) % 3, "module", "2 outputs a row but y has 3 classes"),
    (classifier, X, np.where(X[:, 1] > 1, np.nan, Y), "y", "missing labels"),
    (classifier, X, np.array(["a", None] * (N // 2), dtype=object), "y", "missing labels"),
    (classifier, X, np.array(["a", 1] * (N // 2), dtype=object), "y", "several types"),
    (classifier, X, Y[:10], "y", "64 rows but y has 10"),
    (classifier, np.where(X > 1, np.nan, X), Y, "X", "NaN or infinite"),
    (classifier, np.where(X > 1, -1e300, X.astype(np.float64)), Y, "X", "beyond float32's range"),
    (classifier, pd.DataFrame(X).assign(city="x"), Y, "X", "non-numeric columns 'city'"),
    (classifier, X.astype(str), Y, "X", "must be numeric"),
    (classifier, X[:, 0], Y, "module", r"X is 1-D"),
    (regressor, X, np.where(YR > 1, np.nan, YR), "y", "NaN or infinite"),
    (regressor, X, np.where(YR > 1, 1e39, YR.astype(np.float64)), "y", "beyond float32's range"),
    (regressor, X, np.where(Y > 0, "1.5", "x"), "y", "must be numeric"),
    (regressor, X, np.stack([YR, YR], 1), "module", "give the module 2 outputs a row"),
]


@pytest.mark.parametrize(("make", "X", "y", "param", "match"), ESTIMATOR_CASES)
def test_estimators_refuse_in_one_process(
    make: Callable[..., Any], X: Any, y: Any, param: str, match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=match) as caught:
        make().fit(X, y)
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("net", "X", "y", "param", "match"),
    [
        (classifier(), X, None, "y", "fit needs y"),
        (classifier(), X[:0], Y[:0], "X", "no rows"),
        (TorchClassifier(NeedsWidth, max_epochs=1), X, Y, "module", "'width'"),
        (classifier(max_epochs=2**70), X, Y, "max_epochs", r"below 2\*\*63"),
        (classifier(), da.from_array(X, chunks=16), Y, "X", r"X.compute\(\)"),
        (regressor(), X, dd.from_array(YR, chunksize=16), "y", r"y.compute\(\)"),
    ],
)
def test_estimators_refuse_what_skorch_raised_raw(
    net: Any, X: Any, y: Any, param: str, match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=match) as caught:
        net.fit(X, y)
    assert caught.value.param == param


def test_estimators_take_pandas_nullable_and_object_numbers() -> None:
    frame = pd.DataFrame(X).astype("Float64").assign(flag=X[:, 0] > 0)
    net = classifier(module__n_in=D + 1).fit(frame, pd.Series(Y))
    assert list(net.classes_) == [0, 1] and np.isfinite(net.history[-1, "train_loss"])
    two = regressor(module__n_out=2).fit(X.astype(object), np.stack([YR, YR], 1))
    assert two.predict(X).shape == (N, 2)


# -- on a cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    cluster = local_cluster(2)
    with Client(cluster, set_as_default=False) as c:
        yield c
    cluster.close()


def _rank_tasks(dask_scheduler: Any) -> list[str]:
    return [str(p) for p in dask_scheduler.task_prefixes if "training" in p or ".fit" in p]


@pytest.mark.cluster
def test_nan_in_a_later_dask_chunk_is_refused_before_any_rank(client: Client) -> None:
    bad = X.copy()
    bad[-1, 0] = np.nan  # not in the first batch the driver tries
    before = client.run_on_scheduler(_rank_tasks)
    with pytest.raises(InvalidParameterError, match="X has 1 NaN") as caught:
        trainer(client=client).fit(da.from_array(bad, chunks=16), Y)
    assert caught.value.param == "X"
    frame = dd.from_pandas(pd.Series(np.where(np.arange(N) == N - 1, np.inf, YR)), npartitions=2)
    with pytest.raises(InvalidParameterError, match="y has 1 NaN"):
        trainer(client=client, model_fn=lambda: torch.nn.Linear(D, 1), loss_fn=mse_1d).fit(X, frame)
    rows = dd.from_pandas(pd.DataFrame(X), npartitions=2), dd.from_pandas(pd.Series(Y[:40]), 2)
    with pytest.raises(InvalidParameterError, match=r"\(64, 4\) and \(40,\)"):
        trainer(client=client).fit(*rows)  # the partitions' rows counted on the cluster
    assert client.run_on_scheduler(_rank_tasks) == before


@pytest.mark.cluster
def test_images_multi_output_and_int_x_train(client: Client) -> None:
    images = RNG.normal(size=(N, 1, 3, 3)).astype(np.float32)
    conv = lambda: torch.nn.Sequential(  # noqa: E731
        torch.nn.Conv2d(1, 2, 2), torch.nn.Flatten(), torch.nn.Linear(8, 2)
    )
    for Xi in (images, da.from_array(images, chunks=(20, 1, 3, 3))):
        fitted = trainer(client=client, model_fn=conv).fit(Xi, Y)
        assert fitted.model_(torch.from_numpy(images)).shape == (N, 2)
    two = np.stack([YR, -YR], 1)
    multi = trainer(
        client=client, model_fn=lambda: torch.nn.Linear(D, 2), loss_fn=torch.nn.functional.mse_loss
    ).fit(X, two)
    assert multi.history_[-1]["loss"] < multi.history_[0]["loss"]
    ints = (X * 4).round().astype(np.int64)
    from_ints = trainer(client=client).fit(ints, Y).model_
    from_floats = trainer(client=client).fit(ints.astype(np.float32), Y).model_
    for a, b in zip(from_ints.parameters(), from_floats.parameters(), strict=True):
        torch.testing.assert_close(a, b)  # int X trains as the same numbers in float32


@pytest.mark.cluster
@pytest.mark.parametrize(("make", "X", "y", "param", "match"), ESTIMATOR_CASES[:3])
def test_estimators_refuse_data_parallel_before_any_rank(
    client: Client, make: Callable[..., Any], X: Any, y: Any, param: str, match: str
) -> None:
    before = client.run_on_scheduler(_rank_tasks)
    net = make(trainer__n_workers=2, trainer__client=client, batch_size=16)
    with pytest.raises(InvalidParameterError, match=match) as caught:
        net.fit(X, y)
    assert caught.value.param == param
    assert client.run_on_scheduler(_rank_tasks) == before


@pytest.mark.cluster
def test_estimators_take_pandas_strings_and_2d_targets_data_parallel(client: Client) -> None:
    options = {"trainer__n_workers": 2, "trainer__client": client}
    labels = pd.Series(np.where(Y > 0, "yes", "no"))
    net = classifier(**options).fit(pd.DataFrame(X), labels)
    assert list(net.classes_) == ["no", "yes"] and set(net.predict(X)) <= {"no", "yes"}
    two = regressor(module__n_out=2, **options).fit(X, np.stack([YR, YR], 1))
    assert two.predict(X).shape == (N, 2)
    with pytest.raises(InvalidParameterError, match=r"toarray\(\)") as caught:
        classifier(**options).fit(scipy.sparse.csr_matrix(X), Y)
    assert caught.value.param == "X"


@pytest.mark.cluster
def test_workers_that_share_a_process_are_refused_before_any_rank_starts() -> None:
    # torch.distributed keeps one default group per process: the second rank's rendezvous
    # failed, and the process could abort ("terminate called without an active exception").
    from distributed import LocalCluster

    with (
        LocalCluster(n_workers=2, processes=False, dashboard_address=":0") as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        with pytest.raises(InvalidParameterError, match="shares its process") as info:
            trainer(client=client).fit(X, Y)
        assert "processes=True" in str(info.value)
        assert not any(client.has_what().values())  # refused before the shards were placed
        ssp = trainer(client=client, sync="ssp", shuffle=True).fit(X, Y)  # no process group
        assert ssp.transport_ == "dask-actor" and len(ssp.history_) == 2
