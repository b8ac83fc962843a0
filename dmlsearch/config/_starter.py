"""The commented starter file of ``dmlsearch init``."""

from __future__ import annotations

# -- starter file --------------------------------------------------------------------------

#: What ``dmlsearch init`` writes: a complete, commented experiment that validates and runs.
STARTER = """\
# A dmlsearch experiment. Check it with `dmlsearch validate FILE`, run it with
# `dmlsearch run FILE`; any value can be overridden: --set search.n_trials=50.
# Every section is described in docs/config.md.
version: 1                     # the schema this file follows
name: digits-svc               # the experiment's name in the registry (unique)

data:
  dataset: sklearn:load_digits # or: path: train.csv + target: label
                               # or: loader: my_module:load (returns X, y)

model:                         # a Pipeline, one step per line (file order)
  steps:
    scale: sklearn.preprocessing.StandardScaler
    clf:
      class: sklearn.svm.SVC
      params: {kernel: rbf}

search:
  space:                       # <step>__<parameter> for a Pipeline
    clf__C: {type: float, low: 1e-2, high: 1e3, log: true}
    clf__gamma: {type: float, low: 1e-4, high: 1e-1, log: true}
  strategy: tpe                # random, grid, tpe, cmaes, gp or nsga2
  n_trials: 30
  time_budget: 10m             # no trial starts after 10 minutes; running ones stop
  cv: 3
  scoring: accuracy
  random_state: 0

# No cluster section: a LocalCluster on this machine is started for the run. Else e.g.
# cluster:
#   address: tcp://scheduler:8786
# No registry section: $DMLSEARCH_REGISTRY, else ./dmlsearch.db. Else e.g.
# registry:
#   url: sqlite:///experiments.db
"""
