"""scikit-learn's estimator checks, each its own test, run against the shared cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from dmlsearch import SearchCV

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def _current_client(client: Client) -> Iterator[None]:
    # Estimators are built at collection time with client=None; inside this context
    # SearchCV resolves the shared cluster's client as the current one.
    with client.as_current():
        yield


ESTIMATORS = [
    SearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, strategy="grid", cv=2),
    SearchCV(Ridge(), {"alpha": [0.1, 1.0]}, strategy="grid", cv=2),
]


def expected_failures(estimator: SearchCV) -> dict[str, str]:
    return {
        "check_dtype_object": (
            "every trial fails on object-dtype X; like GridSearchCV (which raises "
            "ValueError 'All the fits failed'), the search raises AllTrialsFailedError "
            "carrying the estimator's TypeError traceback, not the TypeError itself"
        ),
    }


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_sklearn_compatible(estimator, check):
    check(estimator)
