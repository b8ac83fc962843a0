"""Bad input in experiment files (docs/reliability.md, "Bad input"), drawn with hypothesis.

``tests/test_bad_input.py`` does this for the Python API; here every malformed experiment
file must give a ``ConfigError`` (a ``DmlsearchError`` and ``ValueError``) whose problems
name the field to fix (its dotted path in the file, and the line) and say what is allowed,
before any work: no cluster is asked for. Each property checks the message's content, not
only the type: the expected path, the allowed values or the range, a did-you-mean for a
near miss, and none of pydantic's or PyYAML's internals.
"""

from __future__ import annotations

import copy
import re
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dmlsearch.runner
import dmlsearch.runner.cluster
import dmlsearch.search
from dmlsearch.config import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    ConfigError,
    ExperimentConfig,
    Problem,
    load_config,
    parse_config,
    run_experiment,
)
from dmlsearch.config._data_model import DataSection, ModelSection
from dmlsearch.config._ensemble import EnsembleSection
from dmlsearch.config._scheduler import SchedulerSection
from dmlsearch.config.schema import (
    ClusterSection,
    LocalClusterSection,
    RegistrySection,
    SearchSection,
)
from dmlsearch.exceptions import DmlsearchError

# Deterministic (derandomize: the same examples every run) and database-free.
EXAMPLES = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# A valid file with every section: each example below breaks one part of it.
VALID: dict[str, Any] = {
    "version": 1,
    "name": "bad-input",
    "description": "a valid base",
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
        },
        "strategy": "random",
        "n_trials": 5,
        "time_budget": "1m",
        "trial_timeout": 30,
        "cv": 3,
        "scoring": "accuracy",
        "random_state": 0,
        "max_retries": 1,
        "max_concurrent_trials": 2,
        "return_train_score": False,
        "time_budget_policy": "stop",
    },
    "scheduler": {
        "kind": "asha",
        "resource": "clf__max_iter",
        "min_resource": 1,
        "max_resource": 27,
        "reduction_factor": 3,
    },
    "cluster": {"local": {"n_workers": 1, "threads_per_worker": 1}},
    "registry": {"url": "sqlite:///bad-input.db", "artifacts": "./artifacts"},
}
#: Ensemble selection needs out-of-fold predictions, which a scheduler's search does not
#: keep: a file with an ensemble section has no scheduler section.
ENSEMBLE = {"kind": "selection", "size": 10, "n_init": 2, "max_candidates": 20}


def base(path: str) -> dict[str, Any]:
    """A copy of the valid file that holds ``path``'s section."""
    data = copy.deepcopy(VALID)
    if path.split(".")[0] == "ensemble":
        del data["scheduler"]
        data["ensemble"] = copy.deepcopy(ENSEMBLE)
    return data


#: Words of pydantic or PyYAML internals that must never reach a user.
INTERNALS = ("Input should be", "instance of", "Value error", "pydantic", "Traceback", "errors.")


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def with_value(path: str, value: Any) -> dict[str, Any]:
    data = base(path)
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return data


def refused(text: str, **kwargs: Any) -> ConfigError:
    """Parse ``text``, which must be refused with a ConfigError (nothing else)."""
    try:
        parse_config(text, source="bad.yaml", **kwargs)
    except ConfigError as exc:
        check_error(exc)
        return exc
    pytest.fail(f"accepted a malformed file:\n{text[:2000]}")


def check_error(exc: ConfigError) -> None:
    """Every problem has a message free of internals (where: checked by each test)."""
    assert isinstance(exc, DmlsearchError) and isinstance(exc, ValueError)
    assert exc.problems
    for p in exc.problems:
        assert p.message.strip(), exc
        for word in INTERNALS:
            assert word not in p.message, (word, str(exc))


def at(exc: ConfigError, path: str) -> Problem:
    """The problem reported at ``path`` (with its line in the file)."""
    found = [p for p in exc.problems if p.path == path]
    assert found, (path, str(exc))
    return found[0]


# -- values of a wrong type, for each field ------------------------------------------------

letters = st.text(string.ascii_letters, min_size=1, max_size=10)
floats_fractional = st.floats(-1e6, 1e6).filter(lambda x: x != int(x))
non_finite = st.sampled_from([float("nan"), float("inf"), float("-inf")])
small_lists = st.lists(st.integers(0, 9), min_size=1, max_size=3)
small_maps = st.dictionaries(letters, st.integers(0, 9), min_size=1, max_size=2)
huge_ints = st.integers(2**63, 2**80)

TEXT_FIELDS = [
    "name",
    "description",
    "data.dataset",
    "registry.url",
    "registry.artifacts",
    "ensemble.model_name",
]
POSITIVE_INT_FIELDS = [
    "search.n_trials",
    "search.max_concurrent_trials",
    "search.workers_per_trial",
    "cluster.local.n_workers",
    "cluster.local.threads_per_worker",
    "scheduler.min_resource",
    "scheduler.max_resource",
    "ensemble.size",
    "ensemble.n_init",
    "ensemble.max_candidates",
]
NON_NEGATIVE_INT_FIELDS = ["search.random_state", "search.max_retries"]
SECONDS_FIELDS = ["search.time_budget", "search.trial_timeout", "cluster.connect_timeout"]
BOOL_FIELDS = ["search.return_train_score", "search.space.clf__C.log"]
CHOICE_FIELDS = {
    "search.strategy": ["random", "grid", "tpe", "cmaes", "gp", "nsga2"],
    "search.time_budget_policy": ["stop", "finish"],
    "scheduler.kind": ["asha", "hyperband", "halving", "median"],
    "ensemble.kind": ["selection"],
}
SECTIONS = ["data", "search", "scheduler", "ensemble", "cluster", "cluster.local", "registry"]

# (field, wrong value, a pattern the message must match: what the field allows)
wrong_values = st.one_of(
    st.tuples(
        st.sampled_from(TEXT_FIELDS),
        st.one_of(st.integers(), st.floats(), st.booleans(), small_lists, small_maps),
        st.just(r"expected text"),
    ),
    st.tuples(
        st.sampled_from(POSITIVE_INT_FIELDS),
        st.one_of(
            st.integers(max_value=0),
            floats_fractional,
            non_finite,
            st.booleans(),
            letters,
            small_lists,
            small_maps,
        ),
        st.just(r"expected an integer"),
    ),
    st.tuples(
        st.sampled_from(NON_NEGATIVE_INT_FIELDS),
        st.one_of(st.integers(max_value=-1), floats_fractional, st.booleans(), letters),
        st.just(r"expected an integer"),
    ),
    st.tuples(
        st.sampled_from(SECONDS_FIELDS),
        st.one_of(
            st.floats(max_value=0),
            st.integers(max_value=0),
            non_finite,
            st.booleans(),
            letters,
            small_lists,
        ),
        st.just(r"seconds"),
    ),
    st.tuples(
        st.sampled_from(BOOL_FIELDS),
        st.one_of(st.integers(), st.floats(), letters, small_lists),
        st.just(r"true or false"),
    ),
    st.tuples(
        st.sampled_from(SECTIONS),
        st.one_of(st.integers(), st.floats(), st.booleans(), letters, small_lists),
        st.just(r"expected a mapping"),
    ),
)


@EXAMPLES
@given(wrong_values)
def test_a_wrong_type_names_the_field_and_what_it_allows(example: tuple[str, Any, str]) -> None:
    path, value, allowed = example
    exc = refused(dump(with_value(path, value)))
    problem = at(exc, path)
    assert re.search(allowed, problem.message), (path, value, problem.message)
    assert problem.line is not None, str(exc)
    if isinstance(value, int) and not isinstance(value, bool) and path in POSITIVE_INT_FIELDS:
        assert "> 0" in problem.message, problem.message  # the range, not only the type
    if isinstance(value, int) and not isinstance(value, bool) and path in NON_NEGATIVE_INT_FIELDS:
        assert ">= 0" in problem.message, problem.message


@EXAMPLES
@given(
    st.sampled_from(sorted(CHOICE_FIELDS)),
    st.one_of(letters, st.integers(), small_lists, st.booleans()),
)
def test_a_value_outside_the_choices_lists_them(path: str, value: Any) -> None:
    choices = CHOICE_FIELDS[path]
    assume(not (isinstance(value, str) and value.lower() in choices))
    exc = refused(dump(with_value(path, value)))
    problem = at(exc, path)
    for choice in choices:
        assert choice in problem.message, (choice, problem.message)


@settings(EXAMPLES, max_examples=30)
@given(
    st.sampled_from([*POSITIVE_INT_FIELDS, *NON_NEGATIVE_INT_FIELDS, "scheduler.reduction_factor"]),
    st.one_of(huge_ints, st.integers(-(2**80), -1)),
)
def test_integers_past_64_bits_are_refused_or_fine(path: str, value: int) -> None:
    # Anywhere a count goes: refused at that field, or fine (a seed or a count may be
    # large), never an OverflowError.
    try:
        parse_config(dump(with_value(path, value)))
    except ConfigError as exc:
        check_error(exc)
        assert at(exc, path).line is not None
    else:
        assert value > 0, (path, value)


# -- unknown keys --------------------------------------------------------------------------

#: Each mapping of the file and the keys it takes.
MAPPINGS: dict[str, list[str]] = {
    "": [f.alias or n for n, f in ExperimentConfig.model_fields.items()],
    "data": list(DataSection.model_fields),
    "model": [f.alias or n for n, f in ModelSection.model_fields.items()],
    "search": list(SearchSection.model_fields),
    "scheduler": list(SchedulerSection.model_fields),
    "ensemble": list(EnsembleSection.model_fields),
    "cluster": [f.alias or n for n, f in ClusterSection.model_fields.items()],
    "cluster.local": list(LocalClusterSection.model_fields),
    "registry": list(RegistrySection.model_fields),
    "search.space.clf__C": ["type", "low", "high", "log"],
    "model.steps.clf": ["class", "params"],
}


@st.composite
def typos(draw: Any, word: str) -> str:
    """``word`` with one letter dropped, doubled, swapped with the next, or replaced."""
    i = draw(st.integers(0, len(word) - 1))
    edit = draw(st.sampled_from(["drop", "double", "swap", "replace", "upper"]))
    if edit == "drop":
        return word[:i] + word[i + 1 :]
    if edit == "double":
        return word[:i] + word[i] + word[i:]
    if edit == "swap" and i < len(word) - 1:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if edit == "upper":
        return word.upper()
    return word[:i] + draw(st.sampled_from("xqz")) + word[i + 1 :]


def _add_key(mapping: str, key: str) -> str:
    data = base(mapping)
    node = data
    for part in [p for p in mapping.split(".") if p]:
        node = node[part]
    node[key] = 1
    return dump(data)


@st.composite
def near_misses(draw: Any) -> tuple[str, str]:
    mapping = draw(st.sampled_from(sorted(MAPPINGS)))
    word = draw(st.sampled_from([k for k in MAPPINGS[mapping] if len(k) >= 4]))
    return mapping, draw(typos(word))


@EXAMPLES
@given(near_misses())
def test_a_misspelt_key_gets_a_did_you_mean(example: tuple[str, str]) -> None:
    mapping, key = example
    keys = MAPPINGS[mapping]
    assume(key not in keys)
    exc = refused(_add_key(mapping, key))
    problem = at(exc, f"{mapping}.{key}" if mapping else key)
    assert f"unknown key {key!r}" in problem.message, problem.message
    suggested = re.search(r"did you mean '([^']+)'\?", problem.message)
    assert suggested is not None and suggested.group(1) in keys, problem.message
    assert problem.line is not None


@EXAMPLES
@given(st.sampled_from(sorted(MAPPINGS)), letters)
def test_an_unknown_key_lists_the_keys_allowed_there(mapping: str, tail: str) -> None:
    key = "zz" + tail
    exc = refused(_add_key(mapping, key))
    problem = at(exc, f"{mapping}.{key}" if mapping else key)
    assert f"unknown key {key!r}" in problem.message, problem.message
    if mapping == "model.steps.clf":
        assert "{class: import.path, params: {...}}" in problem.message, problem.message
    else:
        assert all(k in problem.message for k in MAPPINGS[mapping]), problem.message


@EXAMPLES
@given(st.data())
def test_a_misspelt_search_parameter_names_the_estimators_parameter(data: Any) -> None:
    from sklearn.linear_model import LogisticRegression

    valid = set(LogisticRegression().get_params())
    name = data.draw(st.sampled_from(sorted(n for n in valid if len(n) >= 4)))
    typo = data.draw(typos(name))
    assume(typo not in valid and typo.lower() != typo.upper())
    space = {**VALID["search"]["space"], f"clf__{typo}": [1, 2]}
    exc = refused(dump(with_value("search.space", space)))
    problem = at(exc, f"search.space.clf__{typo}")
    assert f"has no parameter 'clf__{typo}'" in problem.message, problem.message
    assert "did you mean 'clf__" in problem.message, problem.message


# -- out of range, and sections that do not fit together ------------------------------------

out_of_range = st.one_of(
    st.integers(-5, 1).map(lambda v: ("search.cv", v, "at least 2 folds")),
    st.integers(-5, 1).map(lambda v: ("scheduler.reduction_factor", v, r">= 2")),
    st.integers(28, 10**6).map(lambda v: ("scheduler.min_resource", v, "must be <= max_resource")),
    st.integers(11, 10**6).map(lambda v: ("ensemble.n_init", v, r"must be <= size")),
    st.just(("scheduler.resource", "partial_fit", "partial_fit")),
    st.just(("scheduler.resource", "clf__max_itr", "did you mean")),
    st.just(("search.refit", "no_such_scorer", "refit is true or false")),
    st.just(("search.scoring", "acuracy", "did you mean 'accuracy'")),
    st.just(("cluster.local.memory_limit", "ten gigs", "4GiB")),
    st.just(("registry.url", "not a url", "database URL")),
)


@EXAMPLES
@given(out_of_range)
def test_out_of_range_values_say_the_range(example: tuple[str, Any, str]) -> None:
    path, value, allowed = example
    exc = refused(dump(with_value(path, value)))
    assert re.search(allowed, at(exc, path).message), str(exc)


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        ({"scheduler.resource": "clf__C"}, "scheduler.resource", "also searched over"),
        ({"scheduler.resource": "clf__penalty"}, "scheduler.resource", "takes no|counts"),
        ({"ensemble": ENSEMBLE}, "ensemble", "not kept with the scheduler section"),
        ({"search.workers_per_trial": 2}, "search.workers_per_trial", "xgboost's"),
    ],
)
def test_what_a_run_would_refuse_is_refused_at_validation(
    edit: dict[str, Any], path: str, message: str
) -> None:
    data = copy.deepcopy(VALID)
    for key, value in edit.items():
        node = data
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    exc = refused(dump(data))
    assert re.search(message, at(exc, path).message), str(exc)


section_keys = {
    "scheduler": st.dictionaries(
        st.sampled_from(MAPPINGS["scheduler"]),
        st.one_of(
            st.sampled_from(
                [
                    "asha",
                    "hyperband",
                    "median",
                    "halving",
                    "partial_fit",
                    "clf__max_iter",
                    "n_samples",
                    "n_estimators",
                ]
            ),
            st.integers(-3, 100),
            st.booleans(),
            st.none(),
            letters,
        ),
        max_size=5,
    ),
    "ensemble": st.dictionaries(
        st.sampled_from(MAPPINGS["ensemble"]),
        st.one_of(st.just("selection"), st.integers(-3, 100), st.booleans(), letters),
        max_size=5,
    ),
    "cluster": st.dictionaries(
        st.sampled_from(MAPPINGS["cluster"]),
        st.one_of(
            st.just({"n_workers": 1}),
            st.just("tcp://127.0.0.1:8786"),
            st.integers(-1, 3),
            st.just("sklearn.svm.SVC"),
            st.just({"maximum": 2}),
            letters,
        ),
        max_size=3,
    ),
}


@EXAMPLES
@given(st.sampled_from(sorted(section_keys)), st.data())
def test_wrong_scheduler_ensemble_and_cluster_sections(section: str, data: Any) -> None:
    # Whatever a section holds: accepted, or refused with every problem inside the section.
    value = data.draw(section_keys[section])
    try:
        parse_config(dump(with_value(section, value)))
    except ConfigError as exc:
        check_error(exc)
        for p in exc.problems:
            assert p.path == section or p.path.startswith(section + "."), str(exc)


# -- search spaces with bad distributions ---------------------------------------------------

numbers = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, -1e308, "1e-3", "x", None, True, [1]]),
)
dimensions = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["float", "int"]), "low": numbers, "high": numbers},
        optional={"log": st.one_of(st.booleans(), letters), "step": numbers},
    ),
    st.fixed_dictionaries(
        {"type": st.just("categorical")},
        optional={"choices": st.one_of(st.lists(st.integers(), max_size=3), letters, numbers)},
    ),
    st.fixed_dictionaries(
        {"type": st.one_of(letters, st.integers(), small_lists, small_maps)},
        optional={"low": numbers},
    ),
    st.dictionaries(letters, numbers, max_size=3),
    st.one_of(letters, numbers, st.just([]), st.just({})),
)
DIMENSION_WORDS = (
    "low",
    "high",
    "step",
    "log",
    "type",
    "choices",
    "number",
    "integer",
    "range",
    "list",
    "true or false",
    "float",
    "categorical",
    "key",
    "wide",
    "spans",
)


@EXAMPLES
@given(dimensions)
def test_bad_distributions_are_named_with_the_key_to_fix(dimension: Any) -> None:
    text = dump(with_value("search.space.clf__C", dimension))
    try:
        parse_config(text)
    except ConfigError as exc:
        check_error(exc)
        for p in exc.problems:
            assert p.path.startswith("search.space.clf__C") or p.path == "scheduler.resource", exc
            if p.path.startswith("search.space"):
                assert any(w in p.message for w in DIMENSION_WORDS), str(exc)


# -- malformed YAML -------------------------------------------------------------------------

VALID_TEXT = dump(VALID)
VALID_LINES = VALID_TEXT.splitlines(keepends=True)
INDENTED = [i for i, line in enumerate(VALID_LINES) if line.startswith(" ")]
SCALAR_KEY_LINES = [
    i
    for i, line in enumerate(VALID_LINES)
    if re.match(r"^\s*[A-Za-z_]+: \S", line) and not line.strip().startswith("-")
]


@EXAMPLES
@given(st.sampled_from(INDENTED), st.sampled_from(["\t", "\t\t", " \t", "\t "]))
def test_a_tab_in_the_indentation_is_named_with_its_line(index: int, tabs: str) -> None:
    lines = list(VALID_LINES)
    lines[index] = tabs + lines[index].lstrip(" ")
    exc = refused("".join(lines))
    assert len(exc.problems) == 1
    problem = exc.problems[0]
    assert "tab" in problem.message and "spaces" in problem.message, problem.message
    assert problem.line == index + 1, (index + 1, str(exc))


@EXAMPLES
@given(st.sampled_from(SCALAR_KEY_LINES))
def test_a_duplicate_key_names_both_lines(index: int) -> None:
    lines = list(VALID_LINES)
    lines.insert(index + 1, lines[index])
    key = lines[index].strip().partition(":")[0]
    exc = refused("".join(lines))
    assert [p.line for p in exc.problems] == [index + 2], str(exc)
    assert f"duplicate key {key!r} (first on line {index + 1})" in exc.problems[0].message


@EXAMPLES
@given(
    st.one_of(
        st.lists(st.integers(), max_size=3),
        st.integers(),
        st.floats(allow_nan=False),
        letters,
        st.booleans(),
    )
)
def test_a_root_that_is_not_a_mapping(root: Any) -> None:
    exc = refused(dump(root))
    assert "expected a mapping of sections" in exc.problems[0].message, str(exc)
    assert exc.problems[0].line == 1


@EXAMPLES
@given(st.sampled_from(["", " ", "\n\n", "# only a comment\n", "---\n", "null\n", "~\n"]))
def test_an_empty_file_asks_for_version(text: str) -> None:
    exc = refused(text)
    assert exc.problems[0].path == "version"
    assert "version: 1" in exc.problems[0].message


def test_a_file_with_only_its_version_lists_every_missing_section() -> None:
    exc = refused("version: 1\n")
    for section in ("name", "data", "model", "search"):
        assert f"required key {section!r} is missing" in at(exc, section).message


@EXAMPLES
@given(st.integers(MAX_DEPTH + 1, 800), st.booleans())
def test_deep_documents_are_refused_before_they_are_built(depth: int, flow: bool) -> None:
    if flow:
        nested = "[" * depth + "]" * depth
    else:
        nested = "\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, depth + 1))
    exc = refused(VALID_TEXT + "deep: " + nested)
    assert f"nesting deeper than {MAX_DEPTH} levels" in exc.problems[0].message


@settings(EXAMPLES, max_examples=10)
@given(st.integers(1, 64), st.sampled_from(["comment", "value", "keys"]))
def test_huge_documents_are_refused(extra_kib: int, kind: str) -> None:
    size = MAX_FILE_BYTES + extra_kib * 1024
    if kind == "comment":
        text = VALID_TEXT + "#" * size
    elif kind == "value":
        text = VALID_TEXT.replace("a valid base", "x" * size)
    else:  # many small keys, each line short
        text = VALID_TEXT + "".join(f"k{i}: {i}\n" for i in range(size // 8))
    exc = refused(text)
    assert "larger than 1024 KiB" in exc.problems[0].message, str(exc)


def test_a_wide_document_without_aliases_is_not_blamed_on_aliases() -> None:
    text = "version: 1\n" + "".join(f"k{i}: {i}\n" for i in range(60_000))
    exc = refused(text)
    assert "more than 100,000 values" in exc.problems[0].message
    assert "alias" not in exc.problems[0].message


@EXAMPLES
@given(st.binary(min_size=1, max_size=8), st.integers(0, len(VALID_TEXT.encode())))
def test_non_utf8_bytes_give_the_offset(tmp_path: Path, junk: bytes, where: int) -> None:
    raw = VALID_TEXT.encode()
    data = raw[:where] + junk + raw[where:]
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        first_bad = err.start
    else:
        return  # valid UTF-8: covered by the other properties
    path = tmp_path / "bad.yaml"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    check_error(info.value)
    assert f"not UTF-8 text (byte {first_bad}); save the file as UTF-8" in str(info.value)


# -- references to missing files and unimportable code --------------------------------------


@EXAMPLES
@given(st.text(string.ascii_lowercase + "_/", min_size=1, max_size=12))
def test_a_missing_data_file_is_named_with_where_it_was_looked_for(
    tmp_path: Path, name: str
) -> None:
    assume(not name.endswith("/") and "//" not in name)
    data = with_value("data", {"path": f"{name}.csv", "target": "y"})
    file = tmp_path / "exp.yaml"
    file.write_text(dump(data))
    with pytest.raises(ConfigError) as info:
        load_config(file)
    check_error(info.value)
    problem = at(info.value, "data.path")
    assert f"no such file: {(tmp_path / f'{name}.csv').resolve()}" in problem.message
    assert str(tmp_path) in problem.message  # where relative paths resolve


module_names = st.text(string.ascii_lowercase, min_size=1, max_size=8).map(lambda s: f"zz{s}")


@EXAMPLES
@given(
    st.one_of(
        module_names.map(lambda m: (f"{m}.Model", "no module named")),
        letters.map(lambda a: (f"sklearn.linear_model.Zz{a}", "has no attribute")),
        st.sampled_from(["sklearn linear", "3d.Model", "a..b", ".x", "x."]).map(
            lambda p: (p, "not an import path|names no module")
        ),
        st.just(("sklearn.metrics.accuracy_score", "not an estimator class")),
        st.just(("sklearn.svm", "not an estimator class")),
    )
)
def test_an_unimportable_estimator_is_named(example: tuple[str, str]) -> None:
    path, why = example
    for where, data in [
        ("model.steps.clf.class", with_value("model.steps.clf.class", path)),
        ("model.class", with_value("model", path)),  # the shorthand `model: import.path`
    ]:
        exc = refused(dump(data))
        assert re.search(why, at(exc, where).message), str(exc)


def test_an_estimator_module_that_fails_to_import_is_named(tmp_path: Path) -> None:
    (tmp_path / "broken_zz_model.py").write_text("raise RuntimeError('no GPU here')\n")
    file = tmp_path / "exp.yaml"
    file.write_text(dump(with_value("model.steps.clf.class", "broken_zz_model.Model")))
    with pytest.raises(ConfigError) as info:
        load_config(file)
    message = at(info.value, "model.steps.clf.class").message
    assert "importing 'broken_zz_model' failed: RuntimeError: no GPU here" in message


def test_overrides_that_add_unknown_keys_are_blamed_on_the_override() -> None:
    exc = refused(VALID_TEXT, overrides=["serch.n_trials=3"])
    problem = at(exc, "serch")
    assert "did you mean 'search'" in problem.message
    assert "(from --set serch.n_trials=3)" in problem.message and problem.line is None


def test_missing_keys_of_a_section_an_override_added_are_blamed_on_the_override() -> None:
    # The file has no scheduler section: its missing keys were given the line of the
    # file's first key, where nothing is wrong.
    text = dump({k: v for k, v in VALID.items() if k != "scheduler"})
    exc = refused(text, overrides=["scheduler.kind=asha"])
    for key in ("resource", "max_resource"):
        problem = at(exc, f"scheduler.{key}")
        assert "(from --set scheduler.kind=asha)" in problem.message and problem.line is None


# -- before any work -----------------------------------------------------------------------


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Asking for a cluster or a client fails the test; returns what was asked for."""
    asked: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        asked.append("cluster")
        raise AssertionError("a cluster was asked for before the file was checked")

    import distributed

    monkeypatch.setattr(distributed, "Client", refuse)
    monkeypatch.setattr(dmlsearch.runner.cluster, "start_local_cluster", refuse)
    monkeypatch.setattr(dmlsearch.runner, "start_local_cluster", refuse, raising=False)
    for module in (dmlsearch.search, dmlsearch.runner, dmlsearch.runner.cluster):
        monkeypatch.setattr(module, "resolve_client", refuse, raising=False)
    return asked


RUN_TIME_PROBLEMS: list[tuple[dict[str, Any], str, str]] = [
    (
        {"dataset": "sklearn:make_classification", "kwargs": {"n_samples": -3}},
        "data.kwargs",
        r"make_classification\(\.\.\.\) failed: .*'n_samples' .* range \[1, inf\)",
    ),
    (
        {"dataset": "sklearn:load_iris", "kwargs": {"return_X_y": False}},
        "data.kwargs.return_X_y",
        "drop this key",
    ),
    ({"loader": "raising_zz_loader:load"}, "data.loader", "raising_zz_loader:load.*disk full"),
    ({"loader": "raising_zz_loader:not_a_pair"}, "data.loader", r"must return a tuple \(X, y\)"),
]


@pytest.mark.parametrize(("data", "path", "message"), RUN_TIME_PROBLEMS)
def test_data_that_cannot_load_is_refused_before_a_cluster_starts(
    tmp_path: Path, no_cluster: list[str], data: dict[str, Any], path: str, message: str
) -> None:
    (tmp_path / "raising_zz_loader.py").write_text(
        "def load():\n    raise OSError('disk full')\n\n\ndef not_a_pair():\n    return [1]\n"
    )
    cfg_data = with_value("data", data)
    cfg_data["registry"] = {"url": f"sqlite:///{tmp_path / 'r.db'}"}
    file = tmp_path / "exp.yaml"
    file.write_text(dump(cfg_data))
    with pytest.raises(ConfigError) as info:
        run_experiment(load_config(file), progress=False)
    check_error(info.value)
    assert re.search(message, at(info.value, path).message), str(info.value)
    assert no_cluster == []


def test_text_columns_for_a_model_of_numbers_are_refused_before_a_cluster_starts(
    tmp_path: Path, no_cluster: list[str]
) -> None:
    (tmp_path / "text_zz_loader.py").write_text(
        "import pandas as pd\n\n\ndef load():\n"
        "    X = pd.DataFrame({'city': ['x', 'y'] * 10, 'n': ['1', '2'] * 10, 'v': range(20)})\n"
        "    return X, [0, 1] * 10\n"
    )
    data = with_value("data", {"loader": "text_zz_loader:load"})
    data["model"] = "sklearn.linear_model.LogisticRegression"
    data["search"]["space"] = {"C": [1.0]}
    del data["scheduler"]
    data["registry"] = {"url": f"sqlite:///{tmp_path / 'r.db'}"}
    file = tmp_path / "exp.yaml"
    file.write_text(dump(data))
    with pytest.raises(ConfigError) as info:
        run_experiment(load_config(file), progress=False)
    check_error(info.value)
    # 'n' holds numbers as text, which scikit-learn converts: only 'city' is named.
    message = at(info.value, "data").message
    assert "column 'city' holds text, and LogisticRegression takes numbers" in message
    assert no_cluster == []


def test_a_csv_with_only_a_header_is_refused_when_validated(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("a,b,label\n")
    exc = refused(dump(with_value("data", {"path": "d.csv", "target": "label"})), base_dir=tmp_path)
    assert "the data has no rows: d.csv holds only a header" in at(exc, "data.path").message


#: Data that loads but cannot be searched: (file name, the data, where, what is said).
DATA_PROBLEMS: dict[str, tuple[str, Callable[[], pd.DataFrame], str, str]] = {
    "missing labels": (
        "d.csv",
        lambda: pd.DataFrame({"a": range(12), "label": ["x", "y", "x", None] * 3}),
        "data.target",
        "'label' has 3 missing values (rows 3, 7, 11; data rows counted from 0)",
    ),
    "a missing number": (
        "d.parquet",
        lambda: pd.DataFrame({"a": range(12), "label": [1.0] * 5 + [None] + [2.0] * 6}),
        "data.target",
        "'label' has 1 missing value (row 5; data rows counted from 0)",
    ),
    "no rows": (
        "d.parquet",
        lambda: pd.DataFrame({"a": [], "label": []}),
        "data.path",
        "the data has no rows: d.parquet holds none",
    ),
}


@pytest.mark.parametrize("case", list(DATA_PROBLEMS))
def test_data_problems_name_the_data_before_a_cluster_starts(
    tmp_path: Path, no_cluster: list[str], case: str
) -> None:
    # Before, the search's split failed: "cv: cannot split the data: '<' not supported
    # between instances of 'float' and 'str'" or "... Found array with 0 sample(s)".
    name, frame, path, message = DATA_PROBLEMS[case]
    file = tmp_path / name
    if name.endswith(".csv"):
        frame().to_csv(file, index=False)
    else:
        frame().to_parquet(file)
    data = with_model("sklearn.linear_model.LogisticRegression")
    data["data"] = {"path": str(file), "target": "label"}
    error = run_refused(tmp_path, data)
    assert message in at(error, path).message, str(error)
    assert no_cluster == []


def test_a_loader_returning_missing_targets_is_named(tmp_path: Path, no_cluster: list[str]) -> None:
    (tmp_path / "gappy_zz_loader.py").write_text(
        "def load():\n    return [[0.0], [1.0], [2.0], [3.0]], ['a', None, 'b', 'a']\n"
    )
    data = with_model("sklearn.linear_model.LogisticRegression")
    data["data"] = {"loader": "gappy_zz_loader:load"}
    message = at(run_refused(tmp_path, data), "data.loader").message
    assert "the y it returns has 1 missing value (row 1;" in message
    assert no_cluster == []


#: Columns a Parquet file keeps the dtype of, that a model of numbers cannot take.
NOT_NUMBERS: dict[str, tuple[Callable[[], Any], str]] = {
    "text categories": (lambda: pd.Categorical(["r", "g"] * 10), "text"),
    "number-text categories": (lambda: pd.Categorical(["1", "2"] * 10), "text"),
    "dates": (lambda: pd.date_range("2020", periods=20), "dates"),
    "dates in a time zone": (lambda: pd.date_range("2020", periods=20, tz="UTC"), "dates"),
    "durations": (lambda: pd.to_timedelta(range(20), unit="s"), "durations"),
}


@pytest.mark.parametrize("case", list(NOT_NUMBERS))
def test_categories_and_dates_for_a_model_of_numbers_are_refused_before_a_cluster_starts(
    tmp_path: Path, no_cluster: list[str], case: str
) -> None:
    column, holds = NOT_NUMBERS[case]
    frame = pd.DataFrame({"v": range(20), "c": column(), "y": [0, 1] * 10})
    frame.to_parquet(tmp_path / "d.parquet")
    data = with_model("sklearn.linear_model.LogisticRegression")
    data["data"] = {"path": str(tmp_path / "d.parquet"), "target": "y"}
    message = at(run_refused(tmp_path, data), "data.features").message
    assert f"column 'c' holds {holds}, and LogisticRegression takes numbers" in message, message
    assert no_cluster == []


def test_numeric_categories_and_a_model_that_takes_categories_pass_the_column_check() -> None:
    from dmlsearch.config._run import _check_text_columns

    cfg = parse_config(dump(with_model("sklearn.linear_model.LogisticRegression")))
    numbers = pd.DataFrame({"c": pd.Categorical([1, 2] * 5), "b": pd.Categorical([True] * 10)})
    _check_text_columns(cfg, numbers)  # scikit-learn converts these to numbers
    text = pd.DataFrame({"c": pd.Categorical(["r", "g"] * 5)})
    with pytest.raises(ConfigError, match="column 'c' holds text"):
        _check_text_columns(cfg, text)
    cfg = parse_config(dump(with_model("sklearn.ensemble.HistGradientBoostingClassifier")))
    _check_text_columns(cfg, text)  # categorical_features="from_dtype" takes it as it is


def with_model(model: str) -> dict[str, Any]:
    """The valid file with ``model`` (one class) and no scheduler."""
    data = copy.deepcopy(VALID)
    data["model"] = model
    data["search"]["space"] = {"max_iter": [10]} if "Hist" in model else {"C": [1.0]}
    del data["scheduler"]
    return data


def run_refused(tmp_path: Path, data: dict[str, Any]) -> ConfigError:
    """The ConfigError ``run_experiment`` raises for the file ``data`` (a registry in
    ``tmp_path``)."""
    data["registry"] = {"url": f"sqlite:///{tmp_path / 'r.db'}"}
    (tmp_path / "exp.yaml").write_text(dump(data))
    with pytest.raises(ConfigError) as info:
        run_experiment(load_config(tmp_path / "exp.yaml"), progress=False)
    check_error(info.value)
    return info.value


@settings(EXAMPLES, max_examples=20)
@given(wrong_values)
def test_the_cli_refuses_a_bad_file_before_any_work(
    tmp_path: Path, no_cluster: list[str], example: tuple[str, Any, str]
) -> None:
    from typer.testing import CliRunner

    from dmlsearch.cli import app

    path, value, _ = example
    file = tmp_path / "exp.yaml"
    file.write_text(dump(with_value(path, value)))
    result = CliRunner().invoke(app, ["run", str(file)])
    assert result.exit_code == 2, result.output
    assert f"{file}: " in result.output and path in result.output, result.output
    assert "Traceback" not in result.output
    assert no_cluster == []


@pytest.mark.parametrize(("line", "path"), [("3: 1", "3"), ("~: 1", "null"), ("true: 1", "true")])
def test_a_key_that_is_not_a_name_lists_the_names(line: str, path: str) -> None:
    exc = refused(VALID_TEXT + line + "\n")
    assert "keys are names (version, name, description, data" in at(exc, path).message


# -- junk anywhere ---------------------------------------------------------------------------


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


EVERY_PATH = _paths(VALID)
junk = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), letters,
        st.sampled_from(["", " ", "\x00", "a\x00b", "x" * 300, "sklearn", "sklearn.svm.SVC",
                         "clf__C", "{class: x}", "1e-3", "10m", "asha", "local", ".nan"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(letters, st.sampled_from(["class", "params", "type"])),
                        inner, max_size=3),
    ),
    max_leaves=5,
)  # fmt: skip


def _put(node: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set ``value`` at ``path`` if an earlier change left that place; else nothing."""
    for i, part in enumerate(path):
        if isinstance(node, dict):
            ok = i == len(path) - 1 or part in node
        else:
            ok = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not ok:
            return
        if i == len(path) - 1:
            node[part] = value
        else:
            node = node[part]


@settings(
    EXAMPLES, max_examples=int(__import__("os").environ.get("DMLSEARCH_BAD_INPUT_EXAMPLES", "80"))
)
@given(st.lists(st.tuples(st.sampled_from(EVERY_PATH), junk), min_size=1, max_size=3))
def test_junk_anywhere_is_refused_with_a_path_or_accepted(changes: list[tuple[Any, Any]]) -> None:
    data = copy.deepcopy(VALID)
    for path, value in changes:
        _put(data, path, value)
    try:
        parse_config(dump(data), source="junk.yaml")
    except ConfigError as exc:
        check_error(exc)
        for p in exc.problems:
            assert p.path, str(exc)  # a field of the file, since the YAML itself is fine
