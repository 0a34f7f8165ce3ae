"""How a run's numbers and names are written in text (`stages.numbers.text`)."""

from __future__ import annotations

from stages.numbers.text import NAME_LIMIT, name_span, ratio


def test_ratio_prints_the_denominator() -> None:
    assert ratio(50, 50) == "50/50 (100.0%)"
    assert ratio(1, 3) == "1/3 (33.3%)"
    assert ratio(0, 0) == "0/0 (n/a)"


def test_a_name_is_one_code_span_cut_to_its_limit() -> None:
    assert name_span("run-1") == "`run-1`"
    assert name_span("a`b <i>") == "``a`b <i>``"  # a backtick inside widens the fence: the span stays one span
    long = name_span("x" * (NAME_LIMIT * 5))
    assert long.startswith("`x") and long.endswith("...`") and len(long) == NAME_LIMIT + 2
