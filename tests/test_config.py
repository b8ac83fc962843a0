"""Experiment files: schema, safe YAML loading, error reporting and the builders."""

from __future__ import annotations

import copy
import math
import string
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from distributed import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmlsearch import Categorical, Float, Int, SearchCV
from dmlsearch.config import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    STARTER,
    ConfigError,
    ExperimentConfig,
    build_cv,
    build_model,
    build_search,
    load_config,
    load_data,
    make_registry,
    open_client,
    parse_config,
)
from dmlsearch.exceptions import DmlsearchError

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
EXAMPLES = [
    "quickstart",
    "xgboost_csv",
    "loader",
    "scheduler_address",
    "asha_sgd",
    "ensemble_selection",
]

# A valid file, as a dict: the base every malformed example below is a mutation of.
VALID: dict[str, Any] = {
    "version": 1,
    "name": "prop",
    "data": {"dataset": "sklearn:load_iris"},
    "model": {
        "steps": {
            "scale": "sklearn.preprocessing.StandardScaler",
            "clf": {"class": "sklearn.linear_model.LogisticRegression", "params": {"max_iter": 50}},
        }
    },
    "search": {
        "space": {
            "clf__C": {"type": "float", "low": 1e-3, "high": 10.0, "log": True},
            "clf__fit_intercept": [True, False],
            "clf__tol": {"type": "categorical", "choices": [1e-4, 1e-3]},
        },
        "strategy": "tpe",
        "n_trials": 5,
        "time_budget": "1m",
        "cv": 3,
        "scoring": "accuracy",
    },
    "cluster": {"local": {"n_workers": 1, "threads_per_worker": 1}},
    "registry": {"url": "sqlite:///prop.db"},
}


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def problems(text: str, **kwargs: Any) -> dict[str, Any]:
    """Parse ``text`` expecting a ConfigError; returns {path: problem}."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, **kwargs)
    return {p.path: p for p in info.value.problems}


def with_value(path: str, value: Any, base: dict[str, Any] | None = None) -> str:
    data = copy.deepcopy(base or VALID)
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return dump(data)


# -- the examples ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_files_validate(name: str) -> None:
    cfg = load_config(EXPERIMENTS / f"{name}.yaml")
    assert cfg.version == 1
    assert cfg.search.space
    assert build_model(cfg).get_params()


def test_valid_base_and_starter_validate() -> None:
    cfg = parse_config(dump(VALID))
    assert cfg.search.space["clf__C"] == Float(1e-3, 10.0, log=True)
    assert cfg.search.space["clf__fit_intercept"] == Categorical([True, False])
    assert cfg.search.time_budget == 60.0
    starter = parse_config(STARTER)
    assert starter.cluster is None  # the embedded default
    assert starter.registry.url is None


def test_relative_data_path_resolves_against_the_file(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)  # not the experiments folder
    cfg = load_config(EXPERIMENTS / "xgboost_csv.yaml")
    assert cfg.data.path == str(EXPERIMENTS / "data" / "classification.csv")
    X, y = load_data(cfg)
    assert X.shape == (1000, 12) and "label" not in X.columns
    assert set(np.unique(y)) == {0, 1}


def test_loader_module_next_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "my_data_mod.py").write_text(
        "import numpy as np\n"
        "def load(n=30):\n"
        "    rng = np.random.default_rng(0)\n"
        "    return rng.normal(size=(n, 3)), (np.arange(n) % 2)\n"
    )
    text = dump({**VALID, "data": {"loader": "my_data_mod:load", "kwargs": {"n": 40}}})
    (tmp_path / "exp.yaml").write_text(text)
    cfg = load_config(tmp_path / "exp.yaml")
    X, y = load_data(cfg)
    assert X.shape == (40, 3) and len(y) == 40
    errors = problems(
        dump({**VALID, "data": {"loader": "my_data_mod:load", "kwargs": {"nn": 1}}}),
        base_dir=tmp_path,
    )
    assert "did you mean 'n'" in errors["data.kwargs.nn"].message


def test_example_loader_and_datasets_load() -> None:
    X, y = load_data(load_config(EXPERIMENTS / "loader.yaml"))
    assert X.shape == (569, 30) and len(y) == 569
    assert abs(float(X.mean().mean())) < 1e-6  # scale_units=True reached the loader
    X, y = load_data(
        parse_config(
            with_value("data", {"dataset": "make_classification", "kwargs": {"n_samples": 50}})
        )
    )
    assert X.shape == (50, 20) and y.shape == (50,)


# -- YAML: numbers, caps, syntax ---------------------------------------------------------------


def test_yaml_12_numbers_and_booleans() -> None:
    text = dump(VALID).replace("max_iter: 50", "max_iter: 50\n        tol: 1e-3")
    cfg = parse_config(text)
    assert build_model(cfg).get_params()["clf__tol"] == 0.001  # YAML 1.1 reads "1e-3" as a string
    # Quoted bounds are coerced too: the schema knows they are numbers.
    cfg = parse_config(
        with_value("search.space.clf__C", {"type": "float", "low": "1e-3", "high": "1E2"})
    )
    assert cfg.search.space["clf__C"] == Float(0.001, 100.0)
    cfg = parse_config(
        with_value("search.space.clf__max_iter", {"type": "int", "low": "1e1", "high": 2e2})
    )
    assert cfg.search.space["clf__max_iter"] == Int(10, 200)
    # `yes` is a string in YAML 1.2: a bool field says so instead of silently accepting it.
    errors = problems(
        dump(VALID).replace("scoring: accuracy", "scoring: accuracy\n  return_train_score: yes")
    )
    assert "search.return_train_score" in errors
    assert (
        parse_config(dump(VALID), overrides=["search.random_state=010"]).search.random_state == 10
    )


def test_deep_nesting_is_refused_before_construction() -> None:
    for nest in ("[" * 1000 + "]" * 1000, "{a: " * 1000 + "1" + "}" * 1000):
        errors = problems(dump(VALID) + "extra: " + nest + "\n")
        assert list(errors) == [""]
        assert "nesting" in errors[""].message
    block = "extra:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, MAX_DEPTH + 5))
    errors = problems(dump(VALID) + block)
    assert f"deeper than {MAX_DEPTH}" in errors[""].message
    assert errors[""].line is not None


def test_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    start = time.perf_counter()
    errors = problems("\n".join(lines) + "\n")
    # A hang detector, not a speed test: expanding the bomb would take minutes and GBs.
    assert time.perf_counter() - start < 30
    assert "expands to more than" in errors[""].message
    many = "base: &b 1\n" + "".join(f"k{i}: *b\n" for i in range(150))
    assert "aliases" in problems(many)[""].message


def test_aliases_within_caps_work() -> None:
    text = dump(VALID).replace("  scoring: accuracy", "  scoring: &metric accuracy")
    text += "description: *metric\n"
    assert parse_config(text).description == "accuracy"


def test_file_level_problems(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_FILE_BYTES + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"version: 1\nname: \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(binary)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="folder"):
        load_config(tmp_path)
    assert "several YAML documents" in problems(dump(VALID) + "---\nversion: 1\n")[""].message
    assert "duplicate key 'name'" in problems(dump(VALID) + "name: again\n")[""].message
    assert "got a list" in problems("- version: 1\n")[""].message
    assert problems("version: 1\nname: [unclosed\n")[""].line == 3
    assert (
        "constructor"
        in problems("version: 1\nname: !!python/object/apply:os.system [ls]\n")[""].message
    )


def test_version() -> None:
    data = {k: v for k, v in VALID.items() if k != "version"}
    assert "version: 1" in problems(dump(data))["version"].message
    newer = problems(with_value("version", 2) + "brand_new_section: {}\n")
    assert list(newer) == ["version"]  # not a list of "unknown key" complaints
    assert "upgrade dmlsearch" in newer["version"].message
    assert problems(with_value("version", "one"))["version"].line == 1
    assert "version" in problems(with_value("version", True))


# -- schema errors: paths, lines, suggestions --------------------------------------------------

BAD_FILE = """\
version: 1
name: bad
serach: {}
data:
  dataset: sklearn:load_digts
model:
  steps:
    scale: sklearn.preprocessing.StandardScalar
    clf:
      class: sklearn.svm.SVC
      params: {kernl: rbf}
search:
  space:
    clf__C: {type: float, low: 5, high: 1}
    clf__gamma: {type: float, low: 0, high: 1e-1, log: true}
    clf__kernel: {type: categorical, choices: []}
    clf__degree: {type: int, low: 1, high: 5, lwo: 3}
    clf__tol: {type: flaot, low: 1, high: 2}
  strategy: tpee
  n_trials: 0
  time_budget: soon
  cv: 1
  scoring: accuracyy
cluster:
  local: {n_workers: 0, threads_per_worker: 1}
"""


def test_every_problem_is_listed_with_path_line_and_hint() -> None:
    errors = problems(BAD_FILE, source="bad.yaml")
    expected = {
        "serach": (3, "did you mean 'search'"),
        "data.dataset": (5, "did you mean 'load_digits'"),
        "model.steps.scale": (8, "did you mean 'StandardScaler'"),
        "model.steps.clf.params.kernl": (11, "did you mean 'kernel'"),
        "search.space.clf__C.low": (14, "greater than high"),
        "search.space.clf__gamma.low": (15, "log=True needs low > 0"),
        "search.space.clf__kernel.choices": (16, "non-empty"),
        "search.space.clf__degree.lwo": (17, "did you mean 'low'"),
        "search.space.clf__tol.type": (18, "did you mean 'float'"),
        "search.strategy": (19, "did you mean 'tpe'"),
        "search.n_trials": (20, "expected an integer > 0"),
        "search.time_budget": (21, "duration"),
        "search.cv": (22, "at least 2 folds"),
        "search.scoring": (23, "did you mean 'accuracy'"),
        "cluster.local.n_workers": (25, "expected an integer > 0"),
    }
    assert set(errors) == set(expected)
    for path, (line, text) in expected.items():
        assert errors[path].line == line, path
        assert text in errors[path].message, (path, errors[path].message)
    with pytest.raises(ConfigError) as info:
        parse_config(BAD_FILE, source="bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml: 15 problems")
    assert "serach (line 3): unknown key 'serach'; did you mean 'search'?" in message
    assert isinstance(info.value, (DmlsearchError, ValueError))


@pytest.mark.parametrize(
    ("path", "value", "error_path", "text"),
    [
        (
            "model",
            {"class": "sklearn.linear_modle.LogisticRegression"},
            "model.class",
            "did you mean 'sklearn.linear_model'",
        ),
        ("model", {"class": "sklearn.svm.SCV"}, "model.class", "did you mean 'SVC'"),
        ("model", {"class": "os.path.join"}, "model.class", "not an estimator class"),
        ("model", {"class": "not a path"}, "model.class", "not an import path"),
        (
            "model",  # the shorthand for a class without params
            "sklearn.svm.SVC",
            "search.space.clf__C",
            "SVC has no parameter 'clf__C' (parameters: C, ",
        ),
        (
            "model",
            {"class": "sklearn.svm.SVC", "params": {"C": -1}},
            "model.params.C",
            "'C' parameter of SVC",
        ),
        (
            "model",
            {"class": "sklearn.svm.SVC", "parms": {}},
            "model.parms",
            "did you mean 'params'",
        ),
        ("model", {"steps": {}}, "model.steps", "at least one step"),
        ("model", {}, "model", "steps (a Pipeline)"),
        (
            "model.steps.clf",
            {"class": "sklearn.svm.SVC", "params": {"probabilty": True}},
            "model.steps.clf.params.probabilty",
            "did you mean 'probability'",
        ),
        ("model.steps.a__b", "sklearn.svm.SVC", "model.steps.a__b", "without '__'"),
        ("search.space.clf__Cc", [1, 2], "search.space.clf__Cc", "did you mean 'clf__C'"),
        ("search.space.clf__C", 3, "search.space.clf__C", "write [3]"),
        ("search.space.clf__C", {"low": 1, "high": 2}, "search.space.clf__C", "missing type"),
        (
            "search.space.clf__C",
            {"type": "float", "low": 1},
            "search.space.clf__C.high",
            "required",
        ),
        (
            "search.space.clf__C",
            {"type": "float", "low": "abc", "high": 2},
            "search.space.clf__C.low",
            "expected a number",
        ),
        (
            "search.space.clf__C",
            {"type": "float", "low": 1, "high": float("inf")},
            "search.space.clf__C.high",
            "finite",
        ),
        (
            "search.space.clf__max_iter",
            {"type": "int", "low": 1.5, "high": 3},
            "search.space.clf__max_iter.low",
            "integer",
        ),
        (
            "search.space.clf__max_iter",
            {"type": "int", "low": 1, "high": 3, "step": 0},
            "search.space.clf__max_iter.step",
            ">= 1",
        ),
        (
            "search.space.clf__C",
            {"type": "float", "low": 1, "high": 2, "log": "yes"},
            "search.space.clf__C.log",
            "true or false",
        ),
        ("search.space", [], "search.space", "empty"),
        ("search.space", "C", "search.space", "expected a mapping"),
        ("search.strategy", "grid", "search.space.clf__C", "finite dimensions"),
        ("search.scoring", ["accuracy", "f1_macro"], "search.refit", "several scorers"),
        ("search.scoring", "roc_aucc", "search.scoring", "did you mean 'roc_auc'"),
        (
            "search.cv",
            {"class": "sklearn.model_selection.KFold", "params": {"n_split": 3}},
            "search.cv.params.n_split",
            "did you mean 'n_splits'",
        ),
        ("search.cv", {"class": "sklearn.svm.SVC"}, "search.cv.class", "not a CV splitter"),
        ("search.cv", "five", "search.cv", "number of folds"),
        ("search.time_budget", -3, "search.time_budget", "> 0"),
        ("search.time_budget_policy", "wait", "search.time_budget_policy", "stop"),
        ("search.n_trials", True, "search.n_trials", "expected an integer"),
        ("search.n_trials", 2.5, "search.n_trials", "integer"),
        ("search.error_score", "zero", "search.error_score", "raise or a number"),
        ("data", {"path": "nope.csv", "target": "y"}, "data.path", "no such file"),
        ("data", {"path": "x.feather", "target": "y"}, "data.format", "format: csv"),
        ("data", {"dataset": "sklearn:load_iris", "loader": "a:b"}, "data.loader", "exactly one"),
        (
            "data",
            {"dataset": "sklearn:load_iris", "target": "y"},
            "data.target",
            "only used with data.path",
        ),
        ("data", {"dataset": "openml:iris"}, "data.dataset", "from scikit-learn"),
        ("data", {"loader": "no_such_module_xyz:load"}, "data.loader", "no module named"),
        ("data", {"loader": "math:pi"}, "data.loader", "not a function"),
        (
            "cluster",
            {"local": {"n_workers": 1}, "address": "tcp://127.0.0.1:8786"},
            "cluster.address",
            "exactly one",
        ),
        ("cluster", {}, "cluster", "exactly one"),
        ("cluster", {"address": "not an address"}, "cluster.address", "scheduler address"),
        (
            "cluster",
            {"address": "tcp://h:1", "scale": 3},
            "cluster.scale",
            "only used with cluster.class",
        ),
        ("cluster", {"class": "no_jobqueue_here.SLURMCluster"}, "cluster.class", "no module named"),
        (
            "cluster",
            {"class": "distributed.SpecCluster", "kwargs": {"scheduer": {}}},
            "cluster.kwargs.scheduer",
            "did you mean 'scheduler'",
        ),
        (
            "cluster",
            {"class": "distributed.LocalCluster", "adapt": {"minimum": 3, "maximum": 1}},
            "cluster.adapt",
            "greater than maximum",
        ),
        ("cluster.local.memory_limit", "lots", "cluster.local.memory_limit", "size"),
        # Negative sizes passed validation, then the run died with an OverflowError traceback.
        ("cluster.local.memory_limit", "-1GB", "cluster.local.memory_limit", "is negative"),
        ("cluster.local.memory_limit", -0.5, "cluster.local.memory_limit", "is negative"),
        ("cluster.local.memory_limit", float("inf"), "cluster.local.memory_limit", "not finite"),
        ("cluster.local.memory_limit", 0, None, None),  # distributed: no limit
        ("cluster.local.memory_limit", 0.5, None, None),  # a fraction of the machine's memory
        ("cluster.local.memory_limit", "auto", None, None),
        ("cluster.local.memory_limit", "500MB", None, None),
        # A valid IPv6 scheduler address was refused; a port past 65535 was accepted.
        ("cluster", {"address": "tcp://[::1]:8786"}, None, None),
        ("cluster", {"address": "[fe80::1%eth0]:8786"}, None, None),
        ("cluster", {"address": "tcp://[not:ipv6]:8786"}, "cluster.address", "IPv6"),
        ("cluster", {"address": "tcp://::1:8786"}, "cluster.address", "scheduler address"),
        ("cluster", {"address": "tcp://10.0.0.5:99999"}, "cluster.address", "1 to 65535"),
        ("cluster", {"address": "tcp://[::1]:0"}, "cluster.address", "1 to 65535"),
        # connect_timeout was silently ignored beside a cluster the run starts.
        (
            "cluster",
            {"local": {"n_workers": 1}, "connect_timeout": 10},
            "cluster.connect_timeout",
            "only used with cluster.address",
        ),
        (
            "cluster",
            {"class": "distributed.LocalCluster", "connect_timeout": 10},
            "cluster.connect_timeout",
            "only used with cluster.address",
        ),
        ("cluster", {"address": "tcp://h:1", "connect_timeout": 10}, None, None),
        (
            "cluster.local.treads_per_worker",
            2,
            "cluster.local.treads_per_worker",
            "did you mean 'threads_per_worker'",
        ),
        ("registry.url", "::not a url::", "registry.url", "database URL"),
        ("registry.uri", "sqlite://", "registry.uri", "did you mean 'url'"),
        ("name", "   ", "name", "printable name"),
        ("name", "svc@v2", "name", "without '@'"),
        (
            "scheduler",
            {"kind": "ahsa", "resource": "n_samples", "max_resource": 9},
            "scheduler.kind",
            "did you mean 'asha'",
        ),
        (
            "scheduler",
            {"kind": "asha", "resource": "n_samples", "min_resource": 27, "max_resource": 9},
            "scheduler.min_resource",
            "must be <= max_resource",
        ),
        (
            "scheduler",
            {
                "kind": "hyperband",
                "resource": "n_samples",
                "max_resource": 9,
                "reduction_factor": 1,
            },
            "scheduler.reduction_factor",
            "expected an integer >= 2",
        ),
        (
            "scheduler",
            {"kind": "asha", "resource": "partial_fit", "max_resource": 9},
            "scheduler.resource",
            "needs an estimator with a partial_fit method",
        ),
        (
            "scheduler",
            {"kind": "asha", "resource": "clf__max_itr", "max_resource": 9},
            "scheduler.resource",
            "did you mean ['clf__max_iter'",
        ),
        ("scheduler", {"kind": "asha", "resource": "clf__max_iter", "max_resource": 9}, None, None),
        (
            "scheduler",
            {"kind": "asha", "resource": "clf__max_iter", "max_resource": 9, "state_store": True},
            "scheduler.state_store",
            "expected auto, false, or a folder",
        ),
        (
            "scheduler",
            {
                "kind": "asha",
                "resource": "clf__max_iter",
                "max_resource": 9,
                "state_store": "nosuch://x",
            },
            "scheduler.state_store",
            "unknown fsspec protocol 'nosuch'",
        ),
    ],
)
def test_field_errors(path: str, value: Any, error_path: str | None, text: str | None) -> None:
    source = with_value(path, value)
    if error_path is None:
        parse_config(source)
        return
    errors = problems(source)
    assert error_path in errors, (error_path, errors)
    assert text in errors[error_path].message, errors[error_path].message
    assert errors[error_path].line is not None


def test_a_misspelt_parameter_does_not_hide_bad_values() -> None:
    """`kernal` used to stop the check: `C: -1` and `tol: 0` were only found in fit."""
    params = {"kernal": "rbf", "C": -1, "tol": 0, "probabilty": True, "gamma": "auto"}
    for path in ("model.steps.clf", "model"):
        spec = {"class": "sklearn.svm.SVC", "params": params}
        base = copy.deepcopy(VALID)
        if path == "model":
            base["search"]["space"] = {"C": [1, 2]}
        errors = problems(with_value(path, spec, base))
        prefix = f"{path}.params."
        assert set(errors) == {prefix + p for p in ("kernal", "probabilty", "C", "tol")}, errors
        assert "did you mean 'kernel'" in errors[prefix + "kernal"].message
        assert "did you mean 'probability'" in errors[prefix + "probabilty"].message
        assert "'C' parameter of SVC" in errors[prefix + "C"].message
        assert "'tol' parameter of SVC" in errors[prefix + "tol"].message
        assert all(p.line is not None for p in errors.values())


def test_estimators_taking_any_keyword_accept_any_name(tmp_path: Path) -> None:
    (tmp_path / "anykw_estimators.py").write_text(
        "from sklearn.linear_model import LogisticRegression\n"
        "class AnyKeywords(LogisticRegression):\n"
        "    def __init__(self, C=1.0, **extra):\n"
        "        super().__init__(C=C)\n"
    )
    spec = {"class": "anykw_estimators.AnyKeywords", "params": {"anything": 1}}
    base = copy.deepcopy(VALID)
    base["search"]["space"] = {"clf__C": [1.0, 2.0]}
    cfg = parse_config(with_value("model.steps.clf", spec, base), base_dir=tmp_path)
    assert type(build_model(cfg).named_steps["clf"]).__name__ == "AnyKeywords"


def test_a_misspelt_name_of_an_estimator_taking_any_keyword_is_refused() -> None:
    # xgboost takes any keyword; with verbosity 0 a probe's `max_dept` was silently ignored.
    pytest.importorskip("xgboost")
    base = ["model={class: xgboost.XGBClassifier, params: {verbosity: 0}}",
            "search.space={max_depth: [2, 3]}"]  # fmt: skip
    found = problems(dump(VALID), overrides=[*base, "model.params.max_dept=3"])
    assert "did you mean 'max_depth'?" in found["model.params.max_dept"].message
    found = problems(dump(VALID), overrides=[*base, "search.space.learning_rat=[0.1, 0.3]"])
    assert "did you mean 'learning_rate'?" in found["search.space.learning_rat"].message
    # Booster parameters and aliases the wrapper does not name stay accepted.
    cfg = parse_config(
        dump(VALID), overrides=[*base, "model.params.eta=0.1", "search.space.alpha=[0, 1]"]
    )
    assert build_model(cfg).get_params()["eta"] == 0.1


def test_space_names_that_set_params_takes_are_accepted() -> None:
    """xgboost's eta is a **kwargs parameter: get_params omits it, set_params takes it."""
    pytest.importorskip("xgboost")
    base = copy.deepcopy(VALID)
    base["model"]["steps"]["clf"] = {"class": "xgboost.XGBClassifier"}
    space: Any = {"clf__eta": {"type": "float", "low": 0.01, "high": 0.5}}
    parse_config(with_value("search.space", space, base))
    space = [{"clf": [{"class": "xgboost.XGBClassifier"}], "clf__eta": [0.1, 0.3]}]
    parse_config(with_value("search.space", space))
    space[0]["scale__with_meen"] = [True]
    errors = problems(with_value("search.space", space))
    assert list(errors) == ["search.space[0].scale__with_meen"]
    assert "did you mean 'scale__with_mean'" in errors["search.space[0].scale__with_meen"].message


def test_conditional_subspaces_and_estimator_choices() -> None:
    space = [
        {
            "clf": [{"class": "sklearn.svm.SVC"}],
            "clf__C": {"type": "float", "low": 0.1, "high": 10},
        },
        {
            "clf": [{"class": "sklearn.tree.DecisionTreeClassifier"}],
            "clf__max_depth": {"type": "int", "low": 1, "high": 5},
        },
    ]
    cfg = parse_config(with_value("search.space", space))
    assert type(cfg.search.space[1]["clf"].choices[0]).__name__ == "DecisionTreeClassifier"
    space[1]["clf__max_dept"] = [1, 2]
    space[0]["clf__C"] = {"type": "float", "low": 5, "high": 1}
    errors = problems(with_value("search.space", space))
    assert "search.space[0].clf__C.low" in errors
    # Reported once the rest is valid:
    space[0]["clf__C"] = {"type": "float", "low": 1, "high": 5}
    errors = problems(with_value("search.space", space))
    assert list(errors) == ["search.space[1].clf__max_dept"]


def test_nested_objects_in_params() -> None:
    model = {
        "class": "sklearn.ensemble.BaggingClassifier",
        "params": {
            "estimator": {
                "class": "sklearn.tree.DecisionTreeClassifier",
                "params": {"max_depth": 3},
            },
            "n_estimators": 5,
        },
    }
    data = {
        **VALID,
        "model": model,
        "search": {**VALID["search"], "space": {"estimator__max_depth": [2, 4]}},
    }
    cfg = parse_config(dump(data))
    est = build_model(cfg)
    assert est.get_params()["estimator__max_depth"] == 3
    model["params"]["estimator"]["params"] = {"max_dept": 3}
    errors = problems(dump(data))
    assert "model.params.estimator.params.max_dept" in errors


def test_csv_target_column_checked(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("a,b,label\n1,2,0\n3,4,1\n")
    errors = problems(with_value("data", {"path": "d.csv", "target": "lable"}), base_dir=tmp_path)
    assert "did you mean 'label'" in errors["data.target"].message
    errors = problems(with_value("data", {"path": "d.csv", "target": "y"}), base_dir=tmp_path)
    assert "columns: a, b, label" in errors["data.target"].message
    # Found by a probe: validated, then every trial failed ("at least one array...").
    (tmp_path / "only.csv").write_text("label\n0\n1\n")
    only = with_value("data", {"path": "only.csv", "target": "label"})
    assert "no feature column" in problems(only, base_dir=tmp_path)["data.target"].message
    import pandas as pd  # Parquet through pyarrow, which the test extras' dask[dataframe] needs

    # A Parquet file's columns are read from its footer while validating, as a CSV's header.
    pd.DataFrame({"label": [0, 1]}).to_parquet(tmp_path / "only.parquet")
    only = with_value("data", {"path": "only.parquet", "target": "label"})
    assert "no feature column" in problems(only, base_dir=tmp_path)["data.target"].message


def test_parquet_columns_checked_while_validating(tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4], "label": [0, 1]}, index=[10, 11])
    frame.to_parquet(tmp_path / "d.parquet")  # the index is stored: not a column
    errors = problems(
        with_value("data", {"path": "d.parquet", "target": "lable"}), base_dir=tmp_path
    )
    assert "d.parquet has no column 'lable'; did you mean 'label'" in errors["data.target"].message
    assert "columns: a, b, label" in errors["data.target"].message
    features = {"path": "d.parquet", "target": "label", "features": ["a", "bb"]}
    errors = problems(with_value("data", features), base_dir=tmp_path)
    assert "did you mean 'b'" in errors["data.features[1]"].message
    narrowed = {"path": "d.parquet", "target": "label", "read_kwargs": {"columns": ["a", "lbl"]}}
    errors = problems(with_value("data", narrowed), base_dir=tmp_path)
    assert "d.parquet has no column 'lbl'" in errors["data.read_kwargs.columns"].message
    cfg = parse_config(
        with_value("data", {"path": "d.parquet", "target": "label"}), base_dir=tmp_path
    )
    X, y = load_data(cfg)
    assert list(X.columns) == ["a", "b"] and list(y) == [0, 1]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    errors = problems(
        with_value("data", {"path": "bad.parquet", "target": "label"}), base_dir=tmp_path
    )
    assert "cannot read bad.parquet" in errors["data.path"].message


def test_csv_features_select_columns(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("id,a,b,note,label\n1,1,2,x,0\n2,3,4,y,1\n")
    data = {"path": "d.csv", "target": "label", "features": ["a", "b"]}
    cfg = parse_config(with_value("data", data), base_dir=tmp_path)
    X, y = load_data(cfg)
    assert list(X.columns) == ["a", "b"] and list(y) == [0, 1]
    errors = problems(
        with_value("data", {**data, "features": ["a", "bb", "label"]}), base_dir=tmp_path
    )
    assert "did you mean 'b'" in errors["data.features[1]"].message
    assert "is the target column" in errors["data.features[2]"].message
    assert "data.features" in problems(
        with_value("data", {**data, "features": []}), base_dir=tmp_path
    )
    cfg = parse_config(with_value("data", {"path": "d.csv", "target": "label"}), base_dir=tmp_path)
    assert list(load_data(cfg)[0].columns) == ["id", "a", "b", "note"]


@pytest.mark.parametrize(
    "suffix",
    [
        ".tsv",
        ".tsv.gz",
        ".tsv.bz2",
        ".tsv.xz",
        ".tsv.zip",
        ".tsv.zst",  # pandas reads it with zstandard (a test extra)
    ],
)
def test_tsv_files_are_read_with_tabs_under_every_compression(tmp_path: Path, suffix: str) -> None:
    import pandas as pd

    frame = pd.DataFrame({"a": [1.5, 2.5], "b": [3, 4], "label": ["x", "y"]})
    frame.to_csv(tmp_path / f"d{suffix}", sep="\t", index=False)
    data = {"path": f"d{suffix}", "target": "label", "features": ["a", "b"]}
    # Validation reads the header: with commas it would be one column, 'a\tb\tlabel'.
    cfg = parse_config(with_value("data", data), base_dir=tmp_path)
    X, y = load_data(cfg)
    assert list(X.columns) == ["a", "b"] and X["a"].tolist() == [1.5, 2.5]
    assert y.tolist() == ["x", "y"]


# -- overrides ---------------------------------------------------------------------------------


def test_overrides() -> None:
    cfg = parse_config(
        dump(VALID),
        overrides=[
            "search.n_trials=7",
            "search.space.clf__C.low=1e-4",
            "search.scoring=[accuracy, f1_macro]",
            "search.refit=accuracy",
            "cluster={address: tcp://127.0.0.1:8786}",
            "description=",
        ],
    )
    assert cfg.search.n_trials == 7
    assert cfg.search.space["clf__C"].low == 1e-4
    assert cfg.search.scoring == ["accuracy", "f1_macro"]
    assert cfg.cluster is not None and cfg.cluster.address == "tcp://127.0.0.1:8786"
    assert cfg.description is None
    errors = problems(dump(VALID), overrides=["search.n_trials=0"])
    assert "from --set search.n_trials=0" in errors["search.n_trials"].message
    assert errors["search.n_trials"].line is None
    for bad, text in [
        ("search.n_trials", "key.path=value"),
        ("=3", "key.path=value"),
        ("name.first=x", "is a str, not a mapping"),
        ("search.n_trials.x=1", "is an int, not a mapping"),
        ("search.n_trials=[1", "not a YAML value"),
    ]:
        with pytest.raises(ConfigError, match=r"--set"):
            parse_config(dump(VALID), overrides=[bad])
        try:
            parse_config(dump(VALID), overrides=[bad])
        except ConfigError as exc:
            assert text in str(exc)


def test_override_does_not_leak_through_aliases() -> None:
    # The override changes one place, not every alias of it.
    text = "shared: &s {n_workers: 1}\n" + dump({k: v for k, v in VALID.items() if k != "cluster"})
    text += "cluster:\n  local: *s\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, overrides=["cluster.local.n_workers=2"])
    # only the unknown top-level key `shared` is wrong; cluster.local got the override
    assert [p.path for p in info.value.problems] == ["shared"]


# -- builders ----------------------------------------------------------------------------------


def test_build_search_maps_every_field(tmp_path: Path) -> None:
    cfg = parse_config(
        dump(VALID),
        overrides=[
            "search.random_state=3",
            "search.max_concurrent_trials=4",
            "search.trial_timeout=90s",
            "search.max_retries=0",
            "search.time_budget_policy=finish",
            "search.error_score=raise",
            "search.return_train_score=true",
            "search.cv={class: sklearn.model_selection.KFold, params: {n_splits: 4}}",
            f"registry.url=sqlite:///{tmp_path / 'r.db'}",
        ],
    )
    with make_registry(cfg) as registry:
        search = build_search(cfg, registry=registry, resume=True)
        assert isinstance(search, SearchCV)
        params = search.get_params(deep=False)
        assert params["strategy"] == "tpe" and params["n_trials"] == 5
        assert params["time_budget"] == 60.0 and params["trial_timeout"] == 90.0
        assert params["time_budget_policy"] == "finish"
        assert params["random_state"] == 3 and params["max_concurrent_trials"] == 4
        assert params["max_retries"] == 0 and params["error_score"] == "raise"
        assert params["workers_per_trial"] == 1
        assert params["return_train_score"] is True and params["resume"] is True
        assert params["experiment_name"] == "prop" and params["registry"] is registry
        assert params["cv"].get_n_splits() == 4
    assert build_cv(cfg) is not build_cv(cfg)  # fresh objects every time
    assert build_model(cfg) is not build_model(cfg)
    assert isinstance(
        ExperimentConfig.model_validate(yaml.safe_load(dump(VALID))), ExperimentConfig
    )


def test_an_ensemble_section_s_default_n_init_fits_a_small_size() -> None:
    from dmlsearch.config._ensemble import EnsembleSection

    assert EnsembleSection(kind="selection", size=3).selection_kwargs()["n_init"] == 3
    assert EnsembleSection(kind="selection").selection_kwargs()["n_init"] == 5
    with pytest.raises(ValueError, match=r"n_init \(4\) must be <= size \(3\)"):
        EnsembleSection(kind="selection", size=3, n_init=4)

    # Found by a probe: refused only after the whole search had run, naming `name`.
    with pytest.raises(ValueError, match=r"model_name\n.*must not contain '@'"):
        EnsembleSection(kind="selection", model_name="a@b")


def test_build_search_maps_workers_per_trial_for_a_model_that_takes_gangs() -> None:
    pytest.importorskip("xgboost")
    cfg = parse_config(
        dump(VALID),
        overrides=[
            "model=xgboost.XGBClassifier",
            "search.space={max_depth: [2, 3]}",
            "search.workers_per_trial=2",
            "cluster.local.n_workers=2",
        ],
    )
    assert build_search(cfg).get_params()["workers_per_trial"] == 2


def test_what_a_gang_run_would_refuse_is_refused_by_validation() -> None:
    # A probe: each of these validated, then `dmlsearch run` refused it seconds later.
    pytest.importorskip("xgboost")
    base = [
        "model=xgboost.XGBClassifier",
        "search.space={max_depth: [2, 3]}",
        "search.workers_per_trial=2",
        "cluster.local.n_workers=2",
    ]
    cases = [
        ("cluster.local.n_workers=1", "search.workers_per_trial", "use at most 1"),
        ("search.trial_timeout=30", "search.trial_timeout", "own timeout"),
        (
            "scheduler={kind: asha, resource: n_samples, max_resource: 90}",
            "scheduler.resource",
            "resource='n_estimators'",
        ),
        (
            "model={class: xgboost.XGBClassifier, params: {early_stopping_rounds: 3}}",
            "model",
            "needs fit's eval_set, which an experiment file cannot pass",
        ),
    ]
    for override, path, words in cases:
        found = problems(dump(VALID), overrides=[*base, override])
        assert words in found[path].message, (override, found)


@pytest.mark.parametrize("store", ["false", "auto", "/shared/states"])
def test_build_search_maps_the_scheduler_section(store: str) -> None:
    cfg = parse_config(
        dump(VALID),
        overrides=[
            "scheduler={kind: hyperband, resource: clf__max_iter, max_resource: 27}",
            "scheduler.reduction_factor=3",
            f"scheduler.state_store={store}",
        ],
    )
    params = build_search(cfg).get_params(deep=False)
    assert params["scheduler"] == "hyperband" and params["resource"] == "clf__max_iter"
    assert (params["min_resource"], params["max_resource"]) == (1, 27)
    assert params["state_store"] == {"false": False}.get(store, store)


@pytest.mark.cluster
def test_open_client_address_and_unreachable(client: Client) -> None:
    address = client.scheduler.address
    cfg = parse_config(dump(VALID), overrides=[f"cluster={{address: '{address}'}}"])
    with open_client(cfg) as c:
        assert c is not None and c.scheduler.address == address
        assert len(c.nthreads()) == 2
    assert c.status == "closed"
    cfg = parse_config(
        dump(VALID), overrides=["cluster={address: 'tcp://127.0.0.1:9', connect_timeout: 1}"]
    )
    start = time.perf_counter()
    with (
        pytest.raises(ConfigError, match=r"cluster.address: cannot reach a Dask scheduler"),
        open_client(cfg),
    ):
        pass
    # connect_timeout is 1 s: far under this bound even on a loaded machine, far over a hang.
    assert time.perf_counter() - start < 30
    with open_client(parse_config(STARTER)) as none:
        assert none is None


def test_open_client_cluster_class() -> None:
    cfg = parse_config(
        dump(VALID),
        overrides=[
            "cluster={class: distributed.LocalCluster, kwargs: {n_workers: 0, processes: false, "
            "dashboard_address: ':0'}, scale: 1}"
        ],
    )
    with open_client(cfg) as c:
        assert c is not None
        c.wait_for_workers(1, timeout=20)
        assert c.submit(math.sqrt, 16).result() == 4.0


# -- property: every malformed file is a ConfigError -------------------------------------------

# Paths that expect a scalar: any mapping there is an error.
SCALAR_PATHS = [
    "version", "name", "data.dataset", "model.steps.scale", "search.strategy",
    "search.n_trials", "search.time_budget", "search.scoring", "search.cv",
    "search.space.clf__C.low", "search.space.clf__C.high", "search.space.clf__C.log",
    "search.space.clf__fit_intercept", "search.random_state", "search.error_score",
    "cluster.local.n_workers", "cluster.local.threads_per_worker", "registry.url",
    "registry.artifacts", "description",
]  # fmt: skip
# Paths that expect a mapping: a scalar or a list there is an error. (Not a dimension: a
# list there is a valid list of choices.)
MAPPING_PATHS = [
    "data", "model", "search", "registry", "cluster.local", "model.steps",
    "model.steps.clf", "model.steps.clf.params",
]  # fmt: skip
# Places an unknown key is an error (in search.space: an unknown parameter).
KEY_PATHS = ["", "data", "model", "search", "cluster", "cluster.local", "registry",
             "search.space.clf__C", "model.steps.clf", "model.steps.clf.params", "search.space"]  # fmt: skip
REQUIRED = [
    "version", "name", "data", "model", "search", "search.space", "data.dataset",
    "model.steps", "search.space.clf__C.low", "search.space.clf__C.type", "cluster.local",
    "model.steps.clf.class",
]  # fmt: skip
BAD_VALUES: list[tuple[str, Any]] = [
    ("version", 2), ("version", 0), ("version", "1.0"), ("version", None), ("version", True),
    ("search.n_trials", 0), ("search.n_trials", -4), ("search.n_trials", 1.5), ("search.n_trials", "many"),
    ("search.n_trials", float("inf")), ("search.time_budget", 0), ("search.time_budget", "-1m"),
    ("search.time_budget", float("nan")), ("search.time_budget", "10 parsecs"), ("search.cv", 1),
    ("search.cv", 0), ("search.cv", True), ("search.strategy", "hyperband"), ("search.strategy", 3),
    ("search.scoring", "accuracyy"), ("search.scoring", []), ("search.scoring", ["accuracy", 3]),
    ("search.refit", 3), ("search.random_state", -1), ("search.max_retries", -1),
    ("search.return_train_score", "yes"), ("search.return_train_score", 1),
    ("search.space.clf__C", {"type": "float", "low": 10, "high": 1}),
    ("search.space.clf__C", {"type": "float", "low": 0, "high": 1, "log": True}),
    ("search.space.clf__C", {"type": "float", "low": -1, "high": 1, "log": True}),
    ("search.space.clf__C", {"type": "categorical", "choices": []}),
    ("search.space.clf__C", {"type": "categorical", "choices": "ab"}),
    ("search.space.clf__C", {"type": "int", "low": 0.5, "high": 3}),
    ("search.space.clf__C", {"type": "int", "low": 1, "high": 3, "log": True, "step": 2}),
    ("search.space.clf__C", {"type": "float", "low": float("nan"), "high": 1}),
    ("search.space.clf__C", {"type": "float", "low": "1e-3", "high": "x"}),
    ("search.space.clf__C", []), ("search.space.clf__C", "1e-3"), ("search.space.clf__C", None),
    ("search.space.clf__C.type", "real"), ("search.space", []), ("search.space", [{}, 3]),
    ("model.steps.clf.class", "sklearn.svm.NoSuchModel"), ("model.steps.clf.class", "nomodule_zz.X"),
    ("model.steps.clf.class", "sklearn.preprocessing.StandardScaler.fit"),
    ("model.steps.clf.params.C", -1.0), ("model.steps.clf.params.penalty", "l3"),
    ("model.steps.clf.params.max_iter", "many"), ("data.dataset", "sklearn:load_nothing"),
    ("data.dataset", "torchvision:mnist"), ("data.path", "missing.csv"),
    ("data.loader", "zz_no_module:load"), ("cluster.local.n_workers", 0),
    ("cluster.local.memory_limit", "ten gigs"), ("cluster.address", "tcp://127.0.0.1:8786"),
    ("cluster.kwargs", {"cores": 1}), ("registry.url", "::"), ("name", ""), ("name", "a\x00b"),
]  # fmt: skip


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value


def _delete(data: dict[str, Any], path: str) -> None:
    keys = path.split(".")
    node: Any = data
    for key in keys[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(keys[-1], None)


_key_text = st.text(string.ascii_letters + "_", min_size=1, max_size=8)
_junk_scalar = st.one_of(
    st.integers(), st.floats(allow_nan=True), st.text(max_size=12), st.booleans(),
    st.lists(st.integers(), min_size=1, max_size=3),
)  # fmt: skip
_junk_mapping = st.dictionaries(
    _key_text.map(lambda k: "zz" + k),
    st.one_of(st.integers(), st.text(max_size=5)),
    min_size=1,
    max_size=3,
)

mutation = st.one_of(
    st.sampled_from(BAD_VALUES).map(lambda pv: ("set", pv[0], pv[1])),
    st.tuples(st.just("set"), st.sampled_from(SCALAR_PATHS), _junk_mapping),
    st.tuples(st.just("set"), st.sampled_from(MAPPING_PATHS), _junk_scalar),
    st.tuples(st.just("key"), st.sampled_from(KEY_PATHS), _key_text.map(lambda k: "zz" + k)),
    st.tuples(st.just("del"), st.sampled_from(REQUIRED), st.none()),
)


@st.composite
def malformed_structure(draw: Any) -> tuple[str, list[str]]:
    data = copy.deepcopy(VALID)
    paths = []
    for kind, path, value in draw(st.lists(mutation, min_size=1, max_size=3)):
        if kind == "set":
            _set(data, path, value)
        elif kind == "del":
            _delete(data, path)
        else:
            target: Any = data
            for key in [k for k in path.split(".") if k]:
                target = target.get(key) if isinstance(target, dict) else None
            if not isinstance(target, dict):
                continue
            target[value] = [1, 2] if path == "search.space" else 1
            path = f"{path}.{value}" if path else value
        paths.append(path)
    if not paths:  # every "key" mutation landed on a mapping a later one replaced
        _delete(data, "name")
        paths.append("name")
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and "address" in cluster and "local" not in cluster:
        # An address is malformed only beside `local`: deleting `local` too would leave a
        # valid file (a cluster given by its address), so keep `local`.
        cluster["local"] = copy.deepcopy(VALID["cluster"]["local"])
    return dump(data), paths


def _nested(depth: int, flow: bool) -> str:
    if flow:
        return "[" * depth + "]" * depth
    return "\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, depth + 1))


@st.composite
def malformed_text(draw: Any) -> str:
    kind = draw(st.sampled_from(["garbage", "deep", "aliases", "traps", "splice"]))
    if kind == "garbage":
        return str(draw(st.text(max_size=200)))
    if kind == "deep":
        depth = draw(st.integers(MAX_DEPTH + 1, 3000))
        return (
            dump(VALID)
            + "extra:"
            + (" " if draw(st.booleans()) else "")
            + _nested(depth, draw(st.booleans()))
        )
    if kind == "aliases":
        width = draw(st.integers(2, 12))
        levels = draw(st.integers(1, 9))
        lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
        for i in range(1, levels + 1):
            lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
        return "\n".join(lines) + "\n"
    if kind == "traps":
        return str(
            draw(
                st.sampled_from(
                    [
                        "version: 1\nname: !!python/object/apply:os.system [echo]\n",
                        "version: 1\n? [a, b]\n: c\n",
                        "version: 1\n\tname: x\n",
                        "version: 1\n---\nversion: 1\n",
                        "%YAML 1.1\n---\nversion: 1\n",
                        "version: 1\nname: *undefined\n",
                        "version: 1\nname: &a x\nagain: &a y\n",
                        "\x00\x01",
                        "version: 1\nname: 'unterminated\n",
                        dump(VALID) + "name: duplicate\n",
                    ]
                )
            )
        )
    # splice: cut a valid file at a random point and insert random text (which may, rarely,
    # leave it valid: `max_iter: 050` is fine)
    text = dump(VALID)
    cut = draw(st.integers(0, len(text)))
    return SPLICED + text[:cut] + str(draw(st.text(min_size=1, max_size=20))) + text[cut:]


SPLICED = "# spliced\n"


def _related(problem_path: str, mutated: str) -> bool:
    return (
        problem_path == mutated
        or problem_path.startswith((mutated + ".", mutated + "["))
        or mutated.startswith((problem_path + ".", problem_path + "["))
    )


@settings(
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.one_of(malformed_structure(), malformed_text().map(lambda t: (t, None))))
def test_malformed_files_always_raise_config_error(example: tuple[str, list[str] | None]) -> None:
    text, mutated = example
    try:
        parse_config(text, source="prop.yaml")
    except ConfigError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.message.strip()
            assert p.path or p.line is not None or mutated is None, str(exc)
        if mutated is not None:
            assert any(_related(p.path, m) for p in exc.problems for m in mutated), (
                mutated,
                str(exc),
            )
        assert "Traceback" not in str(exc)
    else:
        if not text.startswith(SPLICED):
            pytest.fail(f"accepted a malformed file:\n{text}")


@pytest.mark.parametrize(("resource", "expected"), [("n_samples", None), ("clf__max_iter", 1)])
def test_the_scheduler_min_resource_defaults_as_search_cv_does(
    resource: str, expected: int | None
) -> None:
    # None lets SearchCV resolve n_samples to 2 * n_splits * n_classes rows (with 1, rung 0
    # trained each fold on 2 rows); any other resource starts at 1, as before.
    cfg = parse_config(
        dump(VALID),
        overrides=[f"scheduler={{kind: asha, resource: {resource}, max_resource: 27}}"],
    )
    assert cfg.scheduler is not None and cfg.scheduler.min_resource is None
    assert build_search(cfg).get_params()["min_resource"] == expected
