"""Regenerate classification.csv (used by experiments/xgboost_csv.yaml).

    python experiments/data/make_classification_csv.py

1,000 rows, 12 numeric features (6 informative), a binary ``label``; rounded to 4
decimals to keep the file small (~90 KB). Deterministic (random_state=0).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from sklearn.datasets import make_classification

CSV = Path(__file__).with_name("classification.csv")


def main(path: Path = CSV) -> Path:
    X, y = make_classification(
        n_samples=1000,
        n_features=12,
        n_informative=6,
        n_redundant=2,
        class_sep=0.8,
        flip_y=0.03,
        random_state=0,
    )
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).round(4)
    frame["label"] = y
    frame.to_csv(path, index=False)
    return path


if __name__ == "__main__":
    print(main())
