"""Field types and the data and model sections."""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    model_validator,
)

from ._common import Loc, _err, _known, _Problems, _suggest
from ._imports import _base_dir, _build_spec, _build_value, _import, _ImportFailed

# -- field types ---------------------------------------------------------------------------


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise _err(f"expected an integer, got {str(value).lower()}")
    return value


_SECONDS = re.compile(
    r"^\s*(?:(\d+(?:\.\d*)?)\s*h)?\s*(?:(\d+(?:\.\d*)?)\s*m)?\s*(?:(\d+(?:\.\d*)?)\s*s?)?\s*$"
)


def _seconds(value: Any) -> Any:
    """Seconds as a number, or a duration such as ``90s``, ``10m``, ``1h30m``."""
    if isinstance(value, bool):
        raise _err(f"expected seconds (e.g. 600 or 10m), got {value}")
    if isinstance(value, str):
        match = _SECONDS.match(value)
        if not value.strip() or not match or not any(match.groups()):
            raise _err(f"expected seconds or a duration such as 90s, 10m or 1h30m, got {value!r}")
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        value = h * 3600 + m * 60 + s
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)) or value <= 0:
        raise _err(f"expected a number of seconds > 0, got {value!r}")
    return float(value)


PosInt = Annotated[int, BeforeValidator(_no_bool), Field(gt=0)]
NonNegInt = Annotated[int, BeforeValidator(_no_bool), Field(ge=0)]
Seconds = Annotated[float, BeforeValidator(_seconds)]
Text = Annotated[str, Field(min_length=1)]


class _Section(BaseModel):
    """Every section refuses unknown keys (a misspelt key must not be silently ignored)."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, strict=False, arbitrary_types_allowed=True
    )


# -- data ----------------------------------------------------------------------------------

_NOT_XY = {
    "load_files",
    "load_sample_image",
    "load_sample_images",
    "load_svmlight_file",
    "load_svmlight_files",
}


@functools.lru_cache(maxsize=1)
def _sklearn_datasets() -> dict[str, Any]:
    import sklearn.datasets

    return {
        name: getattr(sklearn.datasets, name)
        for name in dir(sklearn.datasets)
        if name.startswith(("load_", "make_")) and name not in _NOT_XY
    }


_FORMATS = {".csv": "csv", ".tsv": "csv", ".txt": "csv", ".parquet": "parquet", ".pq": "parquet"}
_COMPRESSIONS = (".gz", ".bz2", ".zip", ".xz", ".zst")


def _suffix(path: str) -> str:
    """The format's suffix of ``path`` (lower case), under a compression's (``.tsv.bz2``)."""
    name = path.lower()
    for suffix in _COMPRESSIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return os.path.splitext(name)[1]


def _infer_format(path: str) -> str | None:
    return _FORMATS.get(_suffix(path))


def _csv_kwargs(path: str, read_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``pandas.read_csv``'s arguments for ``path``: ``read_kwargs``, with a tab separator
    for ``.tsv`` under any compression docs/config.md lists (unless ``sep`` is given)."""
    kwargs = dict(read_kwargs)
    if _suffix(path) == ".tsv":
        kwargs.setdefault("sep", "\t")
    return kwargs


class DataSection(_Section):
    """Where ``(X, y)`` comes from: exactly one of ``dataset``, ``path`` or ``loader``."""

    dataset: str | None = None
    path: str | None = None
    target: str | None = None
    features: list[str] | None = None
    format: Literal["csv", "parquet"] | None = None
    read_kwargs: dict[str, Any] = Field(default_factory=dict)
    loader: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> DataSection:
        problems = _Problems()
        base_dir = _base_dir(info)
        given = [k for k in ("dataset", "path", "loader") if getattr(self, k) is not None]
        if len(given) != 1:
            loc: Loc = (given[1],) if len(given) > 1 else ()
            problems.add(
                loc,
                "give exactly one of dataset (e.g. sklearn:load_digits), path (a CSV or "
                f"Parquet file, with target) or loader (module:function); got {given or 'none'}",
            )
            problems.raise_if_any("DataSection")
        if self.features is not None and not self.features:
            problems.add(("features",), "an empty list; leave it out to use every other column")
        if self.path is None:
            for key in ("target", "format", "features"):
                if getattr(self, key) is not None:
                    problems.add((key,), "only used with data.path")
            if self.read_kwargs:
                problems.add(("read_kwargs",), "only used with data.path")
        elif self.kwargs:
            problems.add(("kwargs",), "used with dataset or loader; use read_kwargs for a file")
        if self.dataset is not None:
            self._check_dataset(problems)
        elif self.path is not None:
            self._check_path(problems, base_dir)
        elif self.loader is not None:
            self._check_function(self.loader, ("loader",), problems, base_dir)
        problems.raise_if_any("DataSection")
        return self

    def _check_dataset(self, problems: _Problems) -> None:
        assert self.dataset is not None
        prefix, sep, name = self.dataset.rpartition(":")
        if sep and prefix != "sklearn":
            problems.add(
                ("dataset",),
                f"datasets come from scikit-learn (sklearn:{name}); for other data use "
                "path (a file) or loader (module:function)",
                self.dataset,
            )
            return
        funcs = _sklearn_datasets()
        if name not in funcs:
            problems.add(
                ("dataset",),
                f"scikit-learn has no dataset {name!r}{_suggest(name, list(funcs))} "
                "(load_* and make_* functions of sklearn.datasets)",
                self.dataset,
            )
            return
        if name.startswith("load_") and "return_X_y" in self.kwargs:
            problems.add(
                ("kwargs", "return_X_y"),
                "dmlsearch always loads (X, y) (return_X_y=True); drop this key",
            )
            return
        _check_kwargs(funcs[name], self.kwargs, problems)

    def _check_path(self, problems: _Problems, base_dir: Path | None) -> None:
        assert self.path is not None
        if not self.path.strip() or "\x00" in self.path:
            problems.add(
                ("path",),
                f"expected the path of a CSV or Parquet file, got {self.path!r}",
                self.path,
            )
            return
        if self.target is None:
            problems.add(("target",), "required with data.path: the name of the label column")
        fmt = self.format or _infer_format(self.path)
        if fmt is None:
            problems.add(
                ("format",),
                f"cannot tell the format of {self.path!r} from its suffix; set format: csv "
                "or format: parquet",
            )
        if "://" in self.path:
            return  # a remote file (s3://, gs://): checked when read
        resolved = _resolve(self.path, base_dir)
        if resolved.is_dir():
            problems.add(
                ("path",), f"{resolved} is a folder; give a CSV or Parquet file", self.path
            )
            return
        if not resolved.is_file():
            where = f" (relative paths resolve against {base_dir})" if base_dir else ""
            problems.add(("path",), f"no such file: {resolved}{where}", self.path)
            return
        self.path = str(resolved)
        if fmt in ("csv", "parquet") and self.target is not None:
            read = _csv_columns if fmt == "csv" else _parquet_columns
            columns = read(resolved, self.read_kwargs, problems)
            if columns is not None and self.target not in columns:
                problems.add(
                    ("target",),
                    f"{resolved.name} has no column {self.target!r}"
                    f"{_suggest(self.target, columns)} (columns: {_known(columns)})",
                    self.target,
                )
            elif columns is not None and self.features is None and list(columns) == [self.target]:
                problems.add(
                    ("target",),
                    f"{resolved.name}'s only column is the target {self.target!r}: there is no "
                    "feature column to learn from",
                    self.target,
                )
            for i, name in enumerate(self.features or []):
                if columns is not None and name not in columns:
                    problems.add(
                        ("features", i),
                        f"{resolved.name} has no column {name!r}"
                        f"{_suggest(name, columns)} (columns: {_known(columns)})",
                        name,
                    )
                elif name == self.target:
                    problems.add(("features", i), f"{name!r} is the target column", name)

    def _check_function(
        self, path: str, loc: Loc, problems: _Problems, base_dir: Path | None
    ) -> None:
        try:
            func = _import(path, base_dir)
        except _ImportFailed as exc:
            where = (
                f" (modules next to the experiment file, in {base_dir}, import too)"
                if base_dir
                else ""
            )
            problems.add(loc, f"{exc}{where}", path)
            return
        if not callable(func):
            problems.add(loc, f"{path} is not a function returning (X, y)", path)
            return
        _check_kwargs(func, self.kwargs, problems)


def _check_kwargs(
    func: Any,
    kwargs: dict[str, Any],
    problems: _Problems,
    where: Loc = ("kwargs",),
    args: tuple[Any, ...] = (),
) -> None:
    """Whether ``func(*args, **kwargs)`` binds: every unknown name at ``where`` + the name
    (with the closest one), else a missing argument at ``where``."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    name = getattr(func, "__name__", repr(func))
    params = list(signature.parameters.values())
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        names = [
            p.name
            for p in params[len(args) :]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        ]
        unknown = [key for key in kwargs if key not in names]
        for key in unknown:
            problems.add(
                (*where, key), f"{name} has no parameter {key!r}{_suggest(str(key), names)}"
            )
        if unknown:
            return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        problems.add(where, f"{name}: {exc}")


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return p.resolve()


def _csv_columns(path: Path, read_kwargs: dict[str, Any], problems: _Problems) -> list[str] | None:
    import pandas as pd

    kwargs = _csv_kwargs(path.name, read_kwargs)
    kwargs["nrows"] = 1  # the header, and whether a row follows it
    try:
        head = pd.read_csv(path, **kwargs)
    except Exception as exc:
        problems.add(("path",), f"cannot read {path.name}: {type(exc).__name__}: {exc}")
        return None
    if head.empty:
        problems.add(("path",), f"the data has no rows: {path.name} holds only a header")
    return [str(c) for c in head.columns]


def _parquet_columns(
    path: Path, read_kwargs: dict[str, Any], problems: _Problems
) -> list[str] | None:
    """The columns ``pd.read_parquet(path, **read_kwargs)`` gives, from the file's footer
    (no row is read); None where that cannot be told here (no pyarrow: it is checked when
    the file is read)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        with pq.ParquetFile(path) as footer:  # the footer alone, read once
            schema, rows = footer.schema_arrow, footer.metadata.num_rows
    except Exception as exc:
        problems.add(("path",), f"cannot read {path.name}: {type(exc).__name__}: {exc}")
        return None
    if rows == 0:
        problems.add(("path",), f"the data has no rows: {path.name} holds none")
    index = (schema.pandas_metadata or {}).get("index_columns", [])
    columns = [name for name in schema.names if name not in index]
    wanted = read_kwargs.get("columns")
    if not isinstance(wanted, (list, tuple)):
        return columns
    for name in wanted:
        if name not in columns:
            problems.add(
                ("read_kwargs", "columns"),
                f"{path.name} has no column {name!r}{_suggest(str(name), columns)} "
                f"(columns: {_known(columns)})",
            )
    return [str(c) for c in wanted if c in columns]


# -- model ---------------------------------------------------------------------------------


def _model_shorthand(value: Any) -> Any:
    return {"class": value} if isinstance(value, str) else value


class ModelSection(_Section):
    """The estimator: ``class`` + ``params``, or ``steps`` for a Pipeline.

    Any mapping ``{class: ..., params: ...}`` inside ``params`` (or a step) is built as an
    object too, so ColumnTransformers, ensembles and nested Pipelines can be written out.
    """

    cls: str | None = Field(None, alias="class")
    params: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, Any] | None = None
    _estimator: Any = PrivateAttr(None)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ModelSection:
        problems = _Problems()
        self._estimator = _build_model(self, problems, _base_dir(info))
        problems.raise_if_any("ModelSection")
        return self


def _build_model(section: ModelSection, problems: _Problems, base_dir: Path | None) -> Any:
    if section.steps is None:
        if section.cls is None:
            problems.add(
                (), "give class (an estimator such as sklearn.svm.SVC) or steps (a Pipeline)"
            )
            return None
        return _build_spec(
            {"class": section.cls, "params": section.params}, (), problems, base_dir, estimator=True
        )
    if not section.steps:
        problems.add(("steps",), "a Pipeline needs at least one step")
        return None
    if "steps" in section.params:
        problems.add(("params", "steps"), "give the steps under model.steps")
        return None
    steps: list[tuple[str, Any]] = []
    for name, spec in section.steps.items():
        loc: Loc = ("steps", name)
        if not isinstance(name, str) or not name or "__" in name:
            problems.add(loc, f"step names are non-empty strings without '__', got {name!r}")
            continue
        if spec is None or spec == "passthrough":
            steps.append((name, spec))
            continue
        if isinstance(spec, str):
            built = _build_spec(
                {"class": spec}, loc, problems, base_dir, estimator=True, class_loc=loc
            )
        else:
            built = _build_spec(spec, loc, problems, base_dir, estimator=True)
        steps.append((name, built))
    if problems:
        return None
    return _build_pipeline(section, steps, problems, base_dir)


def _build_pipeline(
    section: ModelSection, steps: list[tuple[str, Any]], problems: _Problems, base_dir: Path | None
) -> Any:
    path = section.cls or "sklearn.pipeline.Pipeline"
    try:
        cls = _import(path, base_dir)
    except _ImportFailed as exc:
        problems.add(("class",), str(exc), path)
        return None
    params = {
        k: _build_value(v, ("params", k), problems, base_dir) for k, v in section.params.items()
    }
    if problems:
        return None
    try:
        return cls(steps=steps, **params)
    except TypeError as exc:
        bad = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        loc: Loc = ("params", bad.group(1)) if bad else ("params",)
        problems.add(loc, f"{getattr(cls, '__name__', path)}: {exc}")
    except Exception as exc:
        problems.add(("steps",), f"{type(exc).__name__}: {exc}")
    return None
