"""The throughput benchmarks' engines take turns, and their ratios are taken within a round."""

from __future__ import annotations

from bench.measure import ratio_by_round, rounds
from bench.report import _ratio


def test_arms_take_turns_and_each_gets_its_median():
    order: list[tuple[str, int]] = []

    def arm(label: str, rates: list[float]):
        def once(index: int) -> dict:
            order.append((label, index))
            return {"rows": 100, "seconds": 1.0, "rows_per_s": rates[index]}
        return once

    measured = rounds(3, {"job": arm("job", [90.0, 80.0, 70.0]), "native": arm("native", [100.0, 100.0, 140.0])})

    assert order == [("job", 0), ("native", 0), ("job", 1), ("native", 1), ("job", 2), ("native", 2)]
    assert measured["job"]["median_rows_per_s"] == 80.0
    assert measured["native"]["median_rows_per_s"] == 100.0
    assert ratio_by_round(measured["job"], measured["native"]) == [0.9, 0.8, 0.5]


def test_the_ratio_row_lists_the_rounds_when_it_has_them():
    assert _ratio("job / native", 0.8, 1.0, [0.9, 0.8, 0.5])[3] == "round by round (the engines in turns): 0.90x, 0.80x, 0.50x"
    assert _ratio("job / native", 0.8, 1.0)[3] == ""
