"""Quickstart: a model-based (TPE) search over a Pipeline on scikit-learn's digits, on the embedded default.

No cluster is given, so dmlsearch starts a LocalCluster of worker processes on 127.0.0.1
(printing its dashboard link), runs the trials there and closes it afterwards.

    python experiments/quickstart.py [--n-trials 30]
"""

from __future__ import annotations

import argparse

from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from dmlsearch import Float, Int, SearchCV


def main(n_trials: int = 30) -> SearchCV:
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, random_state=0, stratify=y)
    pipe = Pipeline(
        [
            ("scale", StandardScaler()),
            ("pca", PCA()),
            ("clf", LogisticRegression(max_iter=500)),
        ]
    )
    space = {
        "pca__n_components": Int(8, 48),
        "clf__C": Float(1e-3, 1e2, log=True),
    }
    search = SearchCV(
        pipe, space, strategy="tpe", n_trials=n_trials, cv=3, random_state=0, progress=True
    )
    search.fit(X_train, y_train)
    print(f"best CV accuracy {search.best_score_:.4f} with {search.best_params_}")
    print(f"held-out accuracy {search.score(X_test, y_test):.4f}")
    frame = search.trials_dataframe()
    frame["mean_test_score"] = search.cv_results_["mean_test_score"]
    print(frame.sort_values("mean_test_score", ascending=False).head(5).to_string(index=False))
    return search


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-trials", type=int, default=30)
    main(parser.parse_args().n_trials)
