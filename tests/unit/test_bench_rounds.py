"""The throughput benchmarks' engines take turns, and their ratios are taken within a round."""

from __future__ import annotations

from bench.measure import ratio_by_round, rounds
from bench.report import _p50_goal, _ratio


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


def test_a_goal_for_every_round_is_missed_by_one_round_below_it():
    assert _ratio("job / native", 1.30, 1.25, [1.30, 1.40, 1.20], every_round=True)[2] == ">= 1.25x in every round: missed"
    assert _ratio("job / native", 1.30, 1.25, [1.30, 1.40, 1.26], every_round=True)[2] == ">= 1.25x in every round: met"
    assert _ratio("job / native", 1.30, 1.25, [1.30, 1.40, 1.20])[2] == ">= 1.25x: met", "the medians' ratio alone"


def test_the_latencys_p50_is_judged_against_sparks_floor_of_the_same_run():
    latency = {"floors": {"spark": {"median_p50_ms": 400.0}}}
    assert _p50_goal(520.0, latency) == "<= 1.3x Spark's floor (1.30x): met"
    assert _p50_goal(800.0, latency) == "<= 1.3x Spark's floor (2.00x): missed"
    assert _p50_goal(800.0, {"floors": {}}) == "", "no floor measured: no judgement"
