"""The one-line headline of a recorded error (page, report, summaries)."""

from __future__ import annotations

import traceback

from dmlsearch._errors import error_headline


def _traceback_of(exc: BaseException) -> str:
    try:
        raise exc
    except BaseException:
        return traceback.format_exc()


def _chained() -> str:
    try:
        try:
            raise ValueError("first")
        except ValueError as inner:
            raise KeyError("second") from inner
    except KeyError:
        return traceback.format_exc()


def test_a_multi_line_message_is_named_by_its_first_line():
    # scikit-learn's NaN check and pydantic indent their detail lines under the headline.
    text = _traceback_of(ValueError("Estimator does not accept NaN\nInput X contains NaN.\n  x"))
    assert text.rstrip().endswith("  x")
    assert error_headline(text) == "ValueError: Estimator does not accept NaN"


def test_a_chained_traceback_is_named_by_its_last_exception():
    assert error_headline(_chained()) == "KeyError: 'second'"


def test_source_and_caret_lines_are_skipped():
    def index() -> int:
        values = [1]
        return values[2]

    try:
        index()
    except IndexError:
        text = traceback.format_exc()
    assert error_headline(text) == "IndexError: list index out of range"


def test_an_exception_without_a_message_is_its_type():
    assert error_headline(_traceback_of(RuntimeError())) == "RuntimeError"


def test_plain_text_is_its_first_line_and_nothing_is_empty():
    assert error_headline("column 'age' has 3 NaN\nfill them first") == "column 'age' has 3 NaN"
    assert error_headline("\n\n  timed out after 5 s  \n") == "timed out after 5 s"
    assert error_headline(None) == ""
    assert error_headline("") == ""
    # A traceback's header without frames: the exception after it.
    assert error_headline("Traceback (most recent call last):\nValueError: x\n  y") == (
        "ValueError: x"
    )
    assert error_headline("Traceback of my own") == "Traceback of my own"
