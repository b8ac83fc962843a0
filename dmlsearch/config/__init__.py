"""Experiment files: a versioned YAML schema, safe loading and the builders a run needs.

An experiment file says what to search (``data``, ``model``, ``search``) or what to train
(``data``, ``train``: a data-parallel PyTorch job), where to run (``cluster``) and where to
record (``registry``)::

    cfg = load_config("experiments/quickstart.yaml", overrides=["search.n_trials=5"])
    X, y = load_data(cfg)
    with make_registry(cfg) as registry, open_client(cfg) as client:
        search = build_search(cfg, client=client, registry=registry)
        search.fit(X, y)

Loading is safe against hostile YAML: the file size, nesting depth, alias count and the
size of the document once aliases are expanded are all capped while walking parser events,
before any Python object is built. Numbers follow YAML 1.2 (``1e-3`` is a float, ``yes`` is
a string). Every problem in a file is reported at once, as a :class:`ConfigError` naming
the field path and the line. See docs/config.md.

Modules: ``_common`` (constants, ConfigError), ``_yaml`` (capped loading, overrides),
``_imports`` (user code by path, ``{class, params}`` specs), ``schema`` (the root model
and its cross-section checks) over the sections ``_data_model``, ``_search``, ``_space``
(the search space), ``_cluster`` (cluster and registry) and ``_train`` (the ``train``
section), ``_load`` (field paths and lines,
``load_config``), ``build`` (builders), ``_run`` (running a file), ``_starter``
(``dmlsearch init``).

Nothing here imports Dask or scikit-learn at module level; the builders import what they
build.
"""

from __future__ import annotations

from ._common import (
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_NODES,
    SCHEMA_VERSION,
    ConfigError,
    Problem,
)
from ._data_model import DataSection, ModelSection
from ._load import load_config, parse_config
from ._run import run_experiment, run_training
from ._starter import STARTER
from ._train import TrainSection
from .build import (
    build_cv,
    build_model,
    build_search,
    build_trainer,
    load_data,
    make_registry,
    open_client,
    summary,
)
from .schema import (
    ClusterSection,
    ExperimentConfig,
    LocalClusterSection,
    RegistrySection,
    SearchSection,
)

__all__ = [
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "SCHEMA_VERSION",
    "STARTER",
    "ClusterSection",
    "ConfigError",
    "DataSection",
    "ExperimentConfig",
    "LocalClusterSection",
    "ModelSection",
    "Problem",
    "RegistrySection",
    "SearchSection",
    "TrainSection",
    "build_cv",
    "build_model",
    "build_search",
    "build_trainer",
    "load_config",
    "load_data",
    "make_registry",
    "open_client",
    "parse_config",
    "run_experiment",
    "run_training",
    "summary",
]
