"""Cost from token usage and the price settings: hand-computed costs, and prices never touch a generation or
scoring fingerprint."""

from __future__ import annotations

import pytest

from stages.config.settings import ConfigError, load_settings
from stages.numbers.pricing import Prices, cost_of, money, prices_of, total_cost
from stages.records.usage import Usage


def test_cost_by_hand_with_cached_input() -> None:
    # 1 200 000 input tokens of which 200 000 cached, 300 000 output; $2.50 / $1.25 cached / $10.00 per million:
    # 1.0 * 2.50 + 0.2 * 1.25 + 0.3 * 10.00 = 2.50 + 0.25 + 3.00 = 5.75
    usage = Usage(1_200_000, 300_000, 1_500_000, 40, cached_input_tokens=200_000)
    assert Prices(2.5, 10.0, 1.25).cost(usage) == pytest.approx(5.75, abs=1e-12)
    # without a cached price the cached tokens cost the input price: 1.2 * 2.50 + 0.3 * 10.00 = 6.00
    assert Prices(2.5, 10.0).cost(usage) == pytest.approx(6.0, abs=1e-12)


def test_unset_prices_or_usage_give_no_cost() -> None:
    assert cost_of(Usage(10, 10, 20), None) is None
    assert cost_of(None, Prices(1.0, 1.0)) is None
    assert total_cost([None, None]) is None
    assert total_cost([0.5, None, 0.25]) == 0.75
    assert (money(None), money(0.01234), money(12.5)) == ("-", "$0.0123", "$12.50")


def test_usage_reads_cached_tokens_only_when_they_make_sense() -> None:
    record = {"input_tokens": 100, "output_tokens": 5, "total_tokens": 105, "cached_input_tokens": 60}
    assert Usage.from_record(record) == Usage(100, 5, 105, 0, 60)
    assert Usage.from_record({**record, "cached_input_tokens": 101}) == Usage(100, 5, 105, 0, 0)
    assert Usage.from_record({**record, "cached_input_tokens": "60"}) == Usage(100, 5, 105, 0, 0)
    assert Usage(100, 5, 105).to_record() == {"input_tokens": 100, "output_tokens": 5, "total_tokens": 105, "calls": 0}
    assert (Usage(1, 1, 2, 1, 1) + Usage(3, 1, 4, 1, 2)).cached_input_tokens == 3


def test_prices_are_settings_that_change_no_generation_or_scoring_fingerprint() -> None:
    plain = load_settings({"model": "m", "split": "test"})
    priced = load_settings(
        {
            "model": "m",
            "split": "test",
            "price_input_per_mtok": "2.5",
            "price_output_per_mtok": "10",
            "price_cached_input_per_mtok": "1.25",
        }
    )
    for stage in ("download", "select", "generate", "score"):
        assert plain.fingerprint(stage) == priced.fingerprint(stage)
    assert prices_of(plain) is None
    assert prices_of(priced) == Prices(2.5, 10.0, 1.25)
    assert prices_of(priced.redacted()) == Prices(2.5, 10.0, 1.25)  # as config.json records them
    assert priced.redacted()["price_output_per_mtok"] == 10.0


@pytest.mark.parametrize(
    "words",
    [
        {"price_input_per_mtok": "1"},
        {"price_output_per_mtok": "1"},
        {"price_cached_input_per_mtok": "0.5"},
    ],
)
def test_half_set_prices_are_one_line_errors(words: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="set together"):
        load_settings({"model": "m", **words})


def test_negative_price_is_refused() -> None:
    with pytest.raises(ConfigError, match="invalid price_output_per_mtok=-2: expected a number >= 0"):
        load_settings({"model": "m", "price_input_per_mtok": "1", "price_output_per_mtok": "-2"})


def test_prices_leave_generation_and_details_fingerprints_of_a_real_problem_alone(staged_data_dir, tmp_path) -> None:
    from stages.benchmark.problems import problem_by_id
    from stages.generate.stage import generation_fingerprint_parts
    from stages.score.parent.stage import score_fingerprint

    common = {
        "model": "m",
        "split": "validation",
        "data_dir": str(staged_data_dir),
        "results_dir": str(tmp_path / "results"),
        "h5py_file": str(tmp_path / "targets.h5"),
    }
    plain = load_settings(common, cwd=tmp_path)
    priced = load_settings({**common, "price_input_per_mtok": "3", "price_output_per_mtok": "15"}, cwd=tmp_path)
    assert plain.run_paths == priced.run_paths  # the same run folder
    problem = problem_by_id(plain.data_paths, "1")
    assert generation_fingerprint_parts(plain, problem, 0) == generation_fingerprint_parts(priced, problem, 0)
    assert score_fingerprint(plain, "1") == score_fingerprint(priced, "1")
