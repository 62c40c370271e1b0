"""Tests of table.py, the strategy benchmark's arithmetic (standard library only).

Run with `python3 -m unittest discover -s bench/strategies` (`cargo xtask test` does).
"""

import json
import tempfile
import unittest
from pathlib import Path

import table

RESULTS = Path(__file__).resolve().parents[1] / "results" / "strategies"


def line(tool, strategy, space, evals, budget=1000, **extra):
    """A results line as `cargo ktune replay --json` or the Kernel Tuner helper writes it."""
    reached = sorted(e for e in evals if e is not None)
    unreached = len(evals) - len(reached)
    ordered = reached + [None] * unreached
    n = len(ordered)
    middle = ordered[(n - 1) // 2], ordered[n // 2]
    median = None if None in middle else (middle[0] + middle[1]) / 2
    return {"tool": tool, "space": space, "strategy": strategy, "seeds": n, "budget": budget,
            "evals": evals, "median": median, "q1": None, "q3": None,
            "success_fraction": len(reached) / n, **extra}


def entries_of(lines):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lines.jsonl"
        path.write_text("".join(json.dumps(obj) + "\n" for obj in lines))
        return table.load([str(path)])


class MedianInterval(unittest.TestCase):
    def test_agrees_with_ktune_on_every_committed_line(self):
        # cargo ktune replay computes the interval in Rust (search/src/score.rs); both must agree.
        lines = [json.loads(text) for name in ("ktune.jsonl", "ktune-known.jsonl", "more-seeds.jsonl")
                 for text in (RESULTS / name).read_text().splitlines() if text.strip()]
        lines = [obj for obj in lines if obj["tool"] == "ktune"]
        self.assertTrue(lines)
        for obj in lines:
            with self.subTest(space=obj["space"], strategy=obj["strategy"]):
                self.assertEqual(list(table.median_interval(obj["evals"])), obj["median_interval"])

    def test_unreached_ends_are_beyond_the_budget(self):
        self.assertEqual(table.median_interval([None] * 10), (None, None))
        # 10 seeds: the 1st and the 10th order statistics.
        low, high = table.median_interval([1, 2, 3, 4, 5, 6, 7, None, None, None])
        self.assertEqual(low, 1)
        self.assertIsNone(high)


class Build(unittest.TestCase):
    def test_counts_the_spaces_where_evolutionary_beats_every_kernel_tuner_strategy(self):
        lines = [
            line("ktune", "random", "k/a.json.gz", [40] * 5),
            line("ktune", "evolutionary", "k/a.json.gz", [10] * 5),
            line("kernel_tuner", "pso", "k/a.json.gz", [12] * 5),
            line("kernel_tuner", "basinhopping", "k/a.json.gz", [11] * 5),
            line("ktune", "evolutionary", "k/b.json.gz", [10] * 5),
            line("kernel_tuner", "pso", "k/b.json.gz", [10] * 5),
            line("ktune", "evolutionary", "k/c.json.gz", [10] * 5),
            line("kernel_tuner", "pso", "k/c.json.gz", [None] * 5),
        ]
        built = table.build(entries_of(lines))
        beaten = built["evolutionary_beats_every_kernel_tuner_strategy"]
        # A tie is not a win; an unreached rival is beaten.
        self.assertEqual(beaten, {"spaces": ["k/a.json.gz", "k/c.json.gz"], "count": 2, "of": 3})
        row = next(r for r in built["rows"] if r["space"] == "k/a.json.gz")
        columns = [(c["tool"], c["strategy"]) for c in built["columns"]]
        evolutionary = row["cells"][columns.index(("ktune", "evolutionary"))]
        self.assertEqual(evolutionary["ratio_to_random"], 0.25)
        self.assertFalse(evolutionary["ratio_is_upper_bound"])

    def test_runs_from_known_winners_are_a_column_of_their_own(self):
        lines = [
            line("ktune", "evolutionary", "k/a.json.gz", [50] * 5, known=[]),
            line("ktune", "evolutionary", "k/a.json.gz", [1] * 5, known=["k/b.json.gz"]),
            line("kernel_tuner", "pso", "k/a.json.gz", [20] * 5),
        ]
        built = table.build(entries_of(lines))
        columns = [(c["tool"], c["strategy"]) for c in built["columns"]]
        self.assertIn(("ktune", "evolutionary from other GPUs' winners"), columns)
        # The challenger is the run from nothing, which loses here.
        self.assertEqual(built["evolutionary_beats_every_kernel_tuner_strategy"]["count"], 0)
        self.assertEqual(built["evolutionary_versus_kernel_tuner"][0]["evolutionary"]["median"], 50)


if __name__ == "__main__":
    unittest.main()
