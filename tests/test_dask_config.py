"""dmlsearch's switches in Dask's config: text read as YAML reads it, nonsense refused."""

from __future__ import annotations

import dask
import pytest

from dmlsearch._dask_config import config_flag
from dmlsearch.exceptions import InvalidParameterError

KEY = "dmlsearch.training.shared-memory"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(False, False), (True, True), (0, False), ("false", False), ("False", False),
     ("no", False), ("off", False), ("0", False), ("true", True), ("on", True), ("1", True)],
)  # fmt: skip
def test_a_switch_set_as_text_reads_as_yaml_reads_it(value: object, expected: bool) -> None:
    # bool("false") is True: the string turned nothing off.
    with dask.config.set({KEY: value}):
        assert config_flag(KEY) is expected


def test_an_unreadable_switch_is_refused_naming_the_key() -> None:
    with dask.config.set({KEY: "maybe"}), pytest.raises(InvalidParameterError, match=KEY):
        config_flag(KEY)
    assert config_flag("dmlsearch.no-such-switch") is True
