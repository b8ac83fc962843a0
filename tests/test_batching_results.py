from __future__ import annotations

import numpy as np
import pytest

from dmlsearch._results import param_arrays, rank_scores
from dmlsearch.runner import AdaptiveBatcher


def test_batcher_starts_with_single_trials_then_targets_task_length():
    b = AdaptiveBatcher(target_seconds=0.2)
    assert b.size(1000, 2) == 1
    b.observe([0.01] * 20)
    assert b.size(1000, 2) == 20
    b.observe([1.0] * 20)
    assert b.size(1000, 2) == 1


def test_batcher_spreads_the_tail_over_slots():
    b = AdaptiveBatcher(target_seconds=1.0)
    b.observe([0.001])
    assert b.size(None, 2) == 512
    assert b.size(40, 2) == 10
    assert b.size(3, 2) == 1


def test_batcher_rejects_bad_target():
    with pytest.raises(ValueError):
        AdaptiveBatcher(target_seconds=0)


def test_rank_scores_treats_nan_as_worst():
    assert rank_scores(np.array([0.5, np.nan, 0.9, 0.5])).tolist() == [2, 4, 1, 2]
    assert rank_scores(np.array([np.nan, np.nan])).tolist() == [1, 1]


def test_param_arrays_mask_missing_and_keep_dtypes():
    arrays = param_arrays([{"a": 1, "k": "x"}, {"a": 2}, {"b": [1, 2]}])
    assert arrays["param_a"].dtype.kind == "i"
    assert arrays["param_a"].mask.tolist() == [False, False, True]
    assert arrays["param_k"].dtype == object
    assert arrays["param_b"].dtype == object and arrays["param_b"][2] == [1, 2]
