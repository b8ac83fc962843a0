"""``TorchClassifier`` / ``TorchRegressor``: scikit-learn estimators for PyTorch modules.

Built on skorch's ``NeuralNetClassifier`` / ``NeuralNetRegressor``, which already keep
the estimator contract (``get_params``/``set_params``/``clone``, ``partial_fit``,
``warm_start``, callbacks, per-epoch ``history``). What these classes add, so that a torch
model can be the estimator of a ``SearchCV`` trial like any other:

* defaults for a search: no internal validation split (``train_split=None``: the search
  cross-validates), silent (``verbose=0``), shuffled batches, Adam;
* inputs as scikit-learn takes them: any numeric ``X`` is made float32; a classifier takes
  any labels (encoded to int64 class indices, ``predict`` gives labels back), a regressor
  a 1-D ``y`` (``predict`` is then 1-D too);
* ``random_state``: the module's initial weights and every epoch's shuffling and dropout
  are drawn from it (``None``: from NumPy's global generator, which a search seeds per
  trial), so a fit is reproducible and a fit continued with ``warm_start`` or
  ``partial_fit`` gives the same model as training the epochs at once;
* the project's errors for bad input, before any training: a ``module`` that is not a
  ``torch.nn.Module``, ``module__*`` parameters its constructor does not take, a bad
  ``max_epochs``/``batch_size``/``lr``;
* ``get_params(deep=True)`` also lists the keyword parameters of the module's,
  optimizer's and criterion's constructors (``module__hidden``, ``optimizer__weight_decay``)
  so that a search space can name them without passing them first;
* ``trainer__n_workers`` (default 1), ``trainer__client``: ``fit`` trains data-parallel
  on a gang of that many Dask workers (:mod:`._gang_fold`) and the trained weights come
  back into this net; ``trainer__sync``, ``trainer__average_every``,
  ``trainer__staleness``: how the ranks keep in step (see
  :class:`~dmlsearch.training.DataParallelTrainer`), in such a fit and in a
  ``SearchCV(workers_per_trial=k)`` trial, whose k decides its folds' ranks.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
import warnings
from typing import Any, ClassVar

import cloudpickle  # type: ignore[import-untyped]
import numpy as np
import torch
from sklearn.base import clone
from sklearn.utils import check_random_state
from skorch import NeuralNet, NeuralNetClassifier, NeuralNetRegressor
from skorch.callbacks import BatchScoring, EpochScoring
from skorch.utils import is_dataset, to_numpy

from .._validation import close_parameter
from ..exceptions import InvalidParameterError, NonFiniteOutputError
from ..registry._checks import INT64_MAX
from ._checks import TRAINER_DEFAULTS, check_trainer_options, diverged
from ._data import check_finite, check_numeric
from ._inputs import _float32, check_rows, labels_of, try_first_rows

__all__ = ["TRAINER_DEFAULTS", "TorchClassifier", "TorchRegressor"]

#: Defaults these estimators give skorch's ``**kwargs`` unless the caller sets them.
_DEFAULT_KWARGS: dict[str, Any] = {"iterator_train__shuffle": True}
#: Constructor arguments never listed as ``<prefix>__<name>`` (set otherwise, or by skorch).
_NOT_LISTED = {"self", "params", "lr"}


def _is_module(value: Any) -> bool:
    return isinstance(value, torch.nn.Module) or (
        isinstance(value, type) and issubclass(value, torch.nn.Module)
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _keyword_defaults(cls: Any) -> dict[str, Any]:
    """The keyword parameters of ``cls``'s constructor, with their defaults."""
    if not isinstance(cls, type):
        return {}
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return {}
    return {
        name: p.default
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is not p.empty
        and name not in _NOT_LISTED
    }


def _constructor_names(cls: Any) -> set[str] | None:
    """The names ``cls``'s constructor takes; None when any (``**kwargs``), or unknown."""
    if not isinstance(cls, type):
        return None
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _in_dask_task() -> bool:
    """Whether this runs as a task on a Dask worker (a one-worker search trial)."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def _decode(classes: np.ndarray, y: Any) -> np.ndarray:
    """Class indices (as the net trains on them) as the labels ``predict`` returns."""
    return classes[np.asarray(to_numpy(y)).astype(np.int64)]


def _seed(base: int, epoch: int) -> int:
    return int(np.random.SeedSequence(base, spawn_key=(epoch,)).generate_state(1)[0])


class _TorchEstimator:
    """What both estimators share (a mixin ahead of skorch's classes)."""

    # ``trainer__*`` parameters are accepted, listed and cloned as skorch's prefixed ones.
    prefixes_: ClassVar[list[str]] = [*NeuralNet.prefixes_, "trainer"]

    # Set by skorch or the subclasses; declared for the type checker.
    module: Any
    criterion: Any
    optimizer: Any
    max_epochs: Any
    batch_size: Any
    lr: Any
    random_state: Any
    initialized_: bool
    device: Any
    module_: Any
    criterion_: Any
    history: Any
    seed_: int

    def __init__(
        self,
        module: Any,
        *args: Any,
        optimizer: Any = torch.optim.Adam,
        lr: float = 0.001,
        max_epochs: int = 10,
        batch_size: int = 128,
        train_split: Any = None,
        verbose: int = 0,
        random_state: Any = None,
        **kwargs: Any,
    ) -> None:
        # ``criterion`` and skorch's other arguments pass through ``kwargs``.
        super().__init__(  # type: ignore[call-arg]
            module,
            *args,
            optimizer=optimizer,
            lr=lr,
            max_epochs=max_epochs,
            batch_size=batch_size,
            train_split=train_split,
            verbose=verbose,
            **{**_DEFAULT_KWARGS, **kwargs},
        )
        self.random_state = random_state

    def get_params_for(self, prefix: str) -> dict[str, Any]:
        """skorch's, with a NumPy integer ``batch_size`` (a searched value drawn from an
        array) handed to torch's DataLoader as the ``int`` it requires."""
        params: dict[str, Any] = super().get_params_for(prefix)  # type: ignore[misc]
        fixed = prefix.startswith("iterator_") and "batch_size" not in params
        if fixed and _is_int(self.batch_size):
            params["batch_size"] = int(self.batch_size)
        return params

    def _check_params(self) -> None:
        """Raise :class:`InvalidParameterError` for a parameter skorch would fail on later."""
        if not _is_module(self.module):
            raise InvalidParameterError(
                "module",
                f"expected a torch.nn.Module class (or instance), got {self.module!r}: pass "
                "the class and its arguments as module__<name>, e.g. "
                f"{type(self).__name__}(MyNet, module__hidden=32)",
            )
        if not (_is_module(self.criterion) or callable(self.criterion)):
            raise InvalidParameterError(
                "criterion", f"expected a torch loss class or instance, got {self.criterion!r}"
            )
        if not callable(self.optimizer):
            raise InvalidParameterError(
                "optimizer",
                f"expected a torch.optim.Optimizer class, got {self.optimizer!r}",
            )
        for name in ("max_epochs", "batch_size"):
            value = getattr(self, name)
            whole = name == "batch_size" and _is_int(value) and int(value) == -1
            if not (_is_int(value) and 1 <= int(value) <= INT64_MAX) and not whole:
                extra = " (or -1: the whole data set)" if name == "batch_size" else ""
                raise InvalidParameterError(
                    name, f"expected an int >= 1{extra} (below 2**63), got {value!r}"
                )
        lr = self.lr
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not float(lr) > 0:
            raise InvalidParameterError("lr", f"expected a learning rate > 0, got {lr!r}")
        rs = self.random_state
        fine = rs is None or isinstance(rs, (np.random.RandomState, np.random.Generator))
        if _is_int(rs):
            fine = 0 <= int(rs) < 2**32
        if not fine:
            raise InvalidParameterError(
                "random_state",
                f"expected None, an int in [0, 2**32), a numpy RandomState or Generator, "
                f"got {rs!r}",
            )
        self.trainer_options()

    def trainer_options(self) -> dict[str, Any]:
        """The ``trainer__*`` options with their defaults; InvalidParameterError if bad."""
        given: dict[str, Any] = self.get_params_for("trainer")
        return check_trainer_options(given)

    # -- parameters -------------------------------------------------------------------------

    def get_params(self, deep: bool = True, **kwargs: Any) -> dict[str, Any]:
        params: dict[str, Any] = super().get_params(deep=deep, **kwargs)  # type: ignore[misc]
        if deep:
            for prefix in ("module", "optimizer", "criterion"):
                for name, default in _keyword_defaults(params.get(prefix)).items():
                    params.setdefault(f"{prefix}__{name}", default)
            for name, default in TRAINER_DEFAULTS.items():
                params.setdefault(f"trainer__{name}", default)
        return params

    def set_params(self, **params: Any) -> Any:
        """skorch's, refusing a ``module__``/``optimizer__``/``criterion__`` argument its
        class's constructor does not take (skorch takes any name, and the fit then fails;
        a search's candidate with it is refused before any trial)."""
        for name in params:
            part, _, leaf = name.partition("__")
            if part not in ("module", "optimizer", "criterion") or not leaf or "__" in leaf:
                continue
            cls = params.get(part, getattr(self, part, None))
            names = _constructor_names(cls)
            if names is None or leaf in names or leaf == "param_groups":
                continue
            close = close_parameter(leaf, names)
            hint = f"; did you mean {part}__{close}?" if close else ""
            raise InvalidParameterError(
                name,
                f"{getattr(cls, '__name__', part)} takes no argument {leaf!r}{hint} (it takes: "
                f"{', '.join(sorted(names - {'self', 'params'}))})",
            )
        return super().set_params(**params)  # type: ignore[misc]

    def __sklearn_clone__(self) -> Any:
        # A trainer__client Client is a handle to a shared cluster: shared, never deepcopied.
        params = self.get_params(deep=False)
        shared = {k: params.pop(k) for k in ["trainer__client"] if k in params}
        return type(self)(**{k: clone(v, safe=False) for k, v in params.items()}, **shared)

    def __getstate__(self) -> dict[str, Any]:
        # skorch's own, with cloudpickle instead of pickle for the torch components: a
        # module class that reached a worker by value (defined in __main__ or a notebook)
        # cannot be pickled by reference there, and a rung step copies its fitted state.
        state = self.__dict__.copy()
        if not isinstance(state.get("trainer__client"), (str, type(None))):
            state["trainer__client"] = None  # a live Client: the current one once unpickled
        prefixes = tuple(getattr(self, "cuda_dependent_attributes_", ()))
        torch_attrs = {k: state.pop(k) for k in list(state) if k.startswith(prefixes)}
        state["__cuda_dependent_attributes__"] = cloudpickle.dumps(torch_attrs)
        return state

    # -- training ---------------------------------------------------------------------------

    def _draw_seed(self) -> int:
        rs = self.random_state
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(2**31 - 1))
        return int(check_random_state(rs).randint(2**31 - 1))

    def initialize(self) -> Any:
        """Initialise skorch's components, the module's weights drawn from ``random_state``."""
        self._check_params()
        return self._initialize_seeded(self._draw_seed())

    def _initialize_seeded(self, seed: int) -> Any:
        """Initialise with ``seed`` as the drawn seed (a data-parallel trial draws its own)."""
        self.seed_ = seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(seed, 0))
            return super().initialize()  # type: ignore[misc]

    def initialize_virtual_params(self) -> None:
        super().initialize_virtual_params()  # type: ignore[misc]
        # trainer__* touch no torch component: a fitted net takes them as plain attributes
        # (skorch would look for a component to re-initialise and fail).
        self._register_virtual_param("trainer__*")  # type: ignore[attr-defined]

    def initialize_module(self) -> Any:
        seed = self.__dict__.get("seed_")
        # Seeded here too, not only in initialize(): skorch rebuilds the module alone when
        # set_params changes a module__ argument of an initialised net.
        seeded = contextlib.nullcontext() if seed is None else torch.random.fork_rng(devices=[])
        try:
            with seeded:
                if seed is not None:
                    torch.manual_seed(_seed(seed, 0))
                return super().initialize_module()  # type: ignore[misc]
        except TypeError as exc:
            raise self._refused_arguments("module", exc) from exc

    def initialize_criterion(self) -> Any:
        try:
            return super().initialize_criterion()  # type: ignore[misc]
        except TypeError as exc:
            raise self._refused_arguments("criterion", exc) from exc

    def initialize_optimizer(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().initialize_optimizer(*args, **kwargs)  # type: ignore[misc]
        except TypeError as exc:
            raise self._refused_arguments("optimizer", exc) from exc

    def _refused_arguments(self, part: str, exc: TypeError) -> InvalidParameterError:
        """A constructor's TypeError on ``<part>__*`` arguments, as the user's error."""
        cls = getattr(self, part)
        name = getattr(cls, "__name__", type(cls).__name__)
        known = _constructor_names(cls) or set()
        hints = []
        for given in self.get_params_for(part):
            close = close_parameter(given, known) if given not in known else None
            if close is not None:
                hints.append(f"{part}__{given}: did you mean {part}__{close}?")
        hint = f" ({'; '.join(hints)})" if hints else ""
        return InvalidParameterError(
            part,
            f"{name}(**{part}__ parameters) failed: {exc}{hint}. Pass only the arguments its "
            f"constructor takes, as {part}__<name>",
        )

    def on_epoch_begin(self, net: Any, **kwargs: Any) -> None:
        super().on_epoch_begin(net, **kwargs)  # type: ignore[misc]
        # Epoch e's shuffling and dropout depend on (seed_, e) alone: training 3 epochs and
        # 6 more gives the model of 9 epochs at once.
        torch.manual_seed(_seed(self.seed_, len(self.history)))

    def _data_parallel(self) -> bool:
        """Whether ``fit`` trains on a gang: ``trainer__n_workers > 1``, outside a Dask task
        (a one-worker search trial trains in its worker's process, as its k=1 says)."""
        return int(self.trainer_options()["n_workers"]) > 1 and not _in_dask_task()

    def fit(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        if self._data_parallel():
            from ._gang_fold import fit_data_parallel

            fitted = fit_data_parallel(self, X, y, fit_params)
            self._warn_if_diverged()
            return fitted
        # skorch's fit trains in partial_fit, which warns of a diverged fit.
        return super().fit(X, y, **fit_params)  # type: ignore[misc]

    def partial_fit(self, X: Any, y: Any = None, classes: Any = None, **fit_params: Any) -> Any:
        if self._data_parallel():
            from ._gang_fold import fit_data_parallel

            fitted = fit_data_parallel(self, X, y, fit_params, partial=True)
        else:
            fitted = super().partial_fit(X, y, classes=classes, **fit_params)  # type: ignore[misc]
        self._warn_if_diverged()
        return fitted

    def _divergence(self) -> str | None:
        """What :func:`._checks.diverged` says of this net's ``train_loss`` history."""
        history = getattr(self, "history", None) or []
        return diverged((e.get("epoch"), e.get("train_loss")) for e in history)

    def _warn_if_diverged(self) -> None:
        """Warn when the last epoch's ``train_loss`` is NaN or infinite (as
        ``DataParallelTrainer`` does): skorch trains on, silently, into NaN weights."""
        divergence = self._divergence()
        if divergence is not None:
            warnings.warn(divergence, RuntimeWarning, stacklevel=3)

    def _finite(self, out: np.ndarray) -> np.ndarray:
        """``out``, the predictions, or NonFiniteOutputError where any is NaN or infinite."""
        values = np.asarray(out)
        if values.dtype.kind not in "fc" or bool(np.isfinite(values).all()):
            return out
        rows = (~np.isfinite(values.reshape(len(values), -1))).any(axis=1)
        cause = self._divergence()
        raise NonFiniteOutputError(
            f"the model's outputs are NaN or infinite for {int(rows.sum())} of {len(values)} "
            "rows: "
            + (
                cause
                if cause is not None
                else "those rows of X may hold NaN or infinite values (or the weights do)"
            )
        )

    def _target(self, X: Any, y: Any) -> Any:
        return y

    def fit_loop(self, X: Any, y: Any = None, epochs: Any = None, **fit_params: Any) -> Any:
        X, y = self._checked_inputs(X, y)
        # The epochs reseed torch's global generator: give the caller's state back after.
        with torch.random.fork_rng(devices=[]):
            return super().fit_loop(X, y, epochs=epochs, **fit_params)  # type: ignore[misc]

    def _check_output(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> None:
        """InvalidParameterError if the module's outputs cannot match ``y`` (subclasses)."""

    def _checked_inputs(self, X: Any, y: Any) -> tuple[Any, Any]:
        """``(X, y)`` as the epochs train on them (float32 rows, class indices), after
        everything refused before the first epoch: the rows, the labels, the module and
        criterion on the first rows."""
        if not is_dataset(X):
            X = _float32(X)
            check_rows(X, y)
        y = self._target(X, y)
        if not is_dataset(X):
            self.try_batch(X, y)
        else:
            self._commit_target()
        return X, y

    def check_before_training(self, X: Any, y: Any) -> None:
        """What ``fit(X, y)`` refuses before its first epoch, checked on a copy of this
        unfitted net (a data-parallel search checks its estimator so before any trial)."""
        net = clone(self)
        net.initialize()
        net._checked_inputs(X, y)

    def try_batch(self, X: Any, y: Any) -> None:
        """The module and criterion on the first rows of ``X`` (float32) and the encoded
        ``y``, before training (:func:`._inputs.try_first_rows`)."""
        try_first_rows(self, X, y)
        self._commit_target()

    def _commit_target(self) -> None:
        """Keep what ``_target`` learnt of ``y`` once the fit is past its checks (a refused
        fit leaves a fitted net as it was)."""

    def get_dataset(self, X: Any, y: Any = None) -> Any:
        if is_dataset(X):
            return X
        return super().get_dataset(_float32(X), y)  # type: ignore[misc]


class TorchClassifier(_TorchEstimator, NeuralNetClassifier):
    """A PyTorch classifier (skorch's ``NeuralNetClassifier``) for scikit-learn and SearchCV.

    ``module``: a ``torch.nn.Module`` class (its arguments as ``module__<name>``) or
    instance, whose output is one logit per class. Labels may be any values: ``classes_``
    holds them sorted, ``predict`` returns them. Other parameters are skorch's (``lr``,
    ``max_epochs``, ``batch_size``, ``optimizer__*``, ``callbacks``, ``warm_start``...).
    """

    def __init__(
        self, module: Any, *args: Any, criterion: Any = torch.nn.CrossEntropyLoss, **kwargs: Any
    ) -> None:
        super().__init__(module, *args, criterion=criterion, **kwargs)

    @property
    def classes_(self) -> np.ndarray:
        """The class labels, sorted as scikit-learn's (skorch gives ``classes`` in the
        order given: its index would not be the label's, as trained by ``_target``)."""
        known = self.__dict__.get("classes_inferred_")
        if known is not None:
            return np.asarray(known)
        if self.classes is not None and len(self.classes):
            return np.unique(np.asarray(self.classes))
        return super().classes_

    def check_data(self, X: Any, y: Any) -> None:
        # skorch infers classes_ from the y it trains on; here y is already encoded and
        # classes_ set from the labels (_target).
        known = self.__dict__.get("classes_inferred_")
        super().check_data(X, y)
        if known is not None:
            self.classes_inferred_ = known

    def fit(self, X: Any, y: Any = None, **fit_params: Any) -> TorchClassifier:
        if not self.warm_start or not self.initialized_:
            self.__dict__.pop("classes_inferred_", None)
        super().fit(X, y, **fit_params)
        return self

    def partial_fit(
        self, X: Any, y: Any = None, classes: Any = None, **fit_params: Any
    ) -> TorchClassifier:
        if not self.initialized_:
            self.__dict__.pop("classes_inferred_", None)
            if classes is not None:
                self.classes_inferred_ = np.unique(np.asarray(classes))
        super().partial_fit(X, y, classes=classes, **fit_params)
        return self

    def notify(self, method_name: str, **cb_kwargs: Any) -> None:
        """skorch's callbacks; a scoring callback with the default ``target_extractor``
        sees the true labels (``y`` is trained as class indices, ``predict`` gives labels)."""
        classes = self.__dict__.get("classes_inferred_")
        swapped = []
        if method_name in ("on_epoch_end", "on_batch_end") and classes is not None:
            decode = functools.partial(_decode, np.asarray(classes))
            for _, callback in getattr(self, "callbacks_", ()):
                scoring = isinstance(callback, (EpochScoring, BatchScoring))
                if scoring and callback.target_extractor is to_numpy:
                    callback.target_extractor = decode  # for this call only
                    swapped.append(callback)
        try:
            super().notify(method_name, **cb_kwargs)
        finally:
            for callback in swapped:
                callback.target_extractor = to_numpy

    def _target(self, X: Any, y: Any) -> Any:
        """``y``'s labels as int64 class indices; sets ``classes_`` on a first fit."""
        if y is None:
            return y
        labels = labels_of(y)
        known = self.classes if self.classes is not None else self.__dict__.get("classes_inferred_")
        try:
            # Sorted, as scikit-learn's classes_: the index of a label is its rank (a
            # given order, e.g. pandas' unique(), made two labels share an index).
            classes = np.unique(labels if known is None else np.asarray(known))
        except TypeError as exc:  # labels of several types: 1 and "a" do not sort
            kinds = sorted({type(v).__name__ for v in labels})
            raise InvalidParameterError(
                "y",
                f"labels of several types ({', '.join(kinds)}) cannot be ordered: make them "
                "one type (e.g. y.astype(str))",
            ) from exc
        if classes.size < 2:
            raise InvalidParameterError(
                "y",
                f"y has one class ({classes.tolist()}): a classifier needs at least 2 (pass "
                "classes= with all labels to partial_fit if later batches bring the others)",
            )
        unknown = np.setdiff1d(labels, classes)
        if unknown.size:
            raise InvalidParameterError(
                "y",
                f"labels {unknown[:5].tolist()} are not among the classes {classes.tolist()} "
                "this model was started with; pass classes= (all labels) to partial_fit's "
                "first call or to the constructor",
            )
        self.classes_inferred_ = classes
        return np.searchsorted(classes, labels).astype(np.int64)

    def _check_output(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> None:
        classes = self.__dict__.get("classes_inferred_")
        per_class = isinstance(self.criterion_, (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss))
        n = 0 if classes is None else len(classes)
        if per_class and n and y_pred.ndim == 2 and y_pred.shape[1] != n:
            raise InvalidParameterError(
                "module",
                f"the module gives {y_pred.shape[1]} outputs a row but y has {n} classes "
                f"{np.asarray(classes)[:5].tolist()}: its last layer needs {n} outputs (one "
                "logit per class)"
                + (
                    "; or, if this y lacks some labels (a cross-validation fold can), pass "
                    "classes= with every label to the constructor"
                    if y_pred.shape[1] > n
                    else ""
                ),
            )

    def predict_proba(self, X: Any) -> np.ndarray:
        """The module's outputs (probabilities with skorch's default criterion);
        NonFiniteOutputError where any is NaN or infinite."""
        return self._finite(super().predict_proba(X))

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class label of each row (labels as in ``classes_``)."""
        proba = self.predict_proba(X)  # first: an unfitted net raises NotFittedError here
        return np.asarray(self.classes_)[proba.argmax(axis=1)]


class TorchRegressor(_TorchEstimator, NeuralNetRegressor):
    """A PyTorch regressor (skorch's ``NeuralNetRegressor``) for scikit-learn and SearchCV.

    ``module``: a ``torch.nn.Module`` class (its arguments as ``module__<name>``) or
    instance, with one output per target (``criterion``: skorch's ``MSELoss``). A 1-D ``y``
    is trained as one column and ``predict`` then returns a 1-D array, as scikit-learn
    regressors do.
    """

    def _target(self, X: Any, y: Any) -> Any:
        if y is None:
            return y
        given = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
        if given.dtype.kind == "O":  # numbers in an object array (None: NaN, refused below)
            with contextlib.suppress(TypeError, ValueError):
                given = given.astype(np.float64)
        check_numeric("y", given.dtype)
        target = given.astype(np.float32)
        check_finite("y", target)
        self.__dict__["_targets_dim"] = target.ndim  # n_targets_dim_ once past the checks
        return target.reshape(-1, 1) if target.ndim == 1 else target

    def _check_output(self, y_pred: torch.Tensor, y_true: torch.Tensor) -> None:
        elementwise = (torch.nn.MSELoss, torch.nn.L1Loss, torch.nn.SmoothL1Loss, torch.nn.HuberLoss)
        if isinstance(self.criterion_, elementwise) and y_pred.shape != y_true.shape:
            raise InvalidParameterError(
                "module",
                f"the module's output (shape {tuple(y_pred.shape)} for {len(y_pred)} rows) "
                f"does not match y's (shape {tuple(y_true.shape)}), and the criterion would "
                f"broadcast one against the other: give the module {y_true.shape[-1]} "
                "outputs a row (one per column of y)",
            )

    def _commit_target(self) -> None:
        dim = self.__dict__.pop("_targets_dim", None)
        if dim is not None:
            self.n_targets_dim_ = dim

    def predict(self, X: Any) -> np.ndarray:
        """The predictions; 1-D when the model was fitted on a 1-D ``y``.
        NonFiniteOutputError where any is NaN or infinite."""
        out = self._finite(np.asarray(super().predict(X)))
        if getattr(self, "n_targets_dim_", 2) == 1 and out.ndim == 2 and out.shape[1] == 1:
            return out.ravel()
        return out
