"""Tabulate strategy-benchmark JSON lines from ktune and Kernel Tuner.

Rows are spaces, columns are strategies of both tools. A cell holds the median
number of evaluations to reach within 5% of the optimum, its ratio to random
search's median on that space, and the share of seeds that reached it when some
did not. The reference random search is ktune's `random` where present, else
Kernel Tuner's `random_sample`.

A median of 50 seeds is noisy on spaces whose seeds split into fast and slow
groups, so a second table sets ktune's `evolutionary` beside the best Kernel
Tuner strategy of each space with both medians' 95% confidence intervals
(distribution-free: order statistics of the seeds, as for a binomial), and says
where one interval lies wholly below the other.
"""

import argparse
import json
import math
import sys
from pathlib import PurePosixPath

TOOL_ORDER = {"ktune": 0, "kernel_tuner": 1}
RANDOM = [("ktune", "random"), ("kernel_tuner", "random_sample")]
CHALLENGER = ("ktune", "evolutionary")


def space_name(path):
    """`<kernel>/<gpu>.json.gz`, whatever folder the tool was given the file from."""
    return PurePosixPath(path.replace("\\", "/")).parts[-2:]


def load(paths):
    """(space, (tool, strategy)) -> JSON object; a later line for the same pair replaces an earlier one."""
    entries = {}
    for path in paths:
        with open(path) as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    sys.exit(f"{path}:{number}: not JSON: {err}")
                strategy = obj["strategy"]
                if obj.get("known"):
                    # started from other recordings' winners: another column, not the challenger
                    strategy += " from other GPUs' winners"
                entries[("/".join(space_name(obj["space"])), (obj["tool"], strategy))] = obj
    return entries


def ratio(median, reference, budget):
    """(value, is_upper_bound) of median / reference, or None when it is unknown.

    An unreached reference median lies beyond the budget, so a reached median
    gives only an upper bound on the ratio.
    """
    if median is None:
        return None
    if reference is None:
        return (median / budget, True)
    return (median / reference, False)


def median_interval(evals, z=1.96):
    """(low, high): a distribution-free ~95% confidence interval for the median of `evals` (None: not reached).

    The order statistics j and k around the middle for which a binomial(n, 1/2)
    count falls between them with ~95% probability (normal approximation); an
    end that lands on an unreached seed is None (beyond the budget).
    """
    n = len(evals)
    ordered = sorted(math.inf if e is None else e for e in evals)
    half_width = z * math.sqrt(n) / 2
    j = max(1, math.floor(n / 2 - half_width))
    k = min(n, math.ceil(n / 2 + 1 + half_width))
    low, high = ordered[j - 1], ordered[k - 1]
    return (None if math.isinf(low) else low, None if math.isinf(high) else high)


def below(a, b):
    """Whether interval `a` lies wholly below interval `b` (None ends are beyond the budget)."""
    return a[1] is not None and (b[0] is None or a[1] < b[0])


def build(entries):
    """The table as plain data: settings, columns, one row per space, and the evolutionary count."""
    spaces = sorted({space for space, _ in entries})
    # ktune's strategies first, each tool's in the order they first appear in its lines
    first_seen = {}
    for _, column in entries:
        first_seen.setdefault(column, len(first_seen))
    columns = sorted(first_seen, key=lambda c: (TOOL_ORDER.get(c[0], 2), first_seen[c]))

    rows = []
    beaten = []
    compared = []
    versus = []
    for space in spaces:
        reference_column = next((c for c in RANDOM if (space, c) in entries), None)
        reference = entries[(space, reference_column)]["median"] if reference_column else None
        cells = {}
        for column in columns:
            obj = entries.get((space, column))
            if obj is None:
                continue
            r = ratio(obj["median"], reference, obj["budget"]) if reference_column else None
            cells[column] = {
                "median": obj["median"],
                "q1": obj["q1"],
                "q3": obj["q3"],
                "success_fraction": obj["success_fraction"],
                "seeds": obj["seeds"],
                "budget": obj["budget"],
                "ratio_to_random": None if r is None else r[0],
                "ratio_is_upper_bound": None if r is None else r[1],
                "median_interval": list(median_interval(obj["evals"])),
            }
        rows.append({
            "space": space,
            "random_reference": ":".join(reference_column) if reference_column else None,
            "cells": [cells.get(column) for column in columns],
        })

        rivals = [c for c in cells if c[0] == "kernel_tuner"]
        if CHALLENGER in cells and rivals:
            compared.append(space)
            ours = cells[CHALLENGER]["median"]
            if ours is not None and all(cells[c]["median"] is None or ours < cells[c]["median"] for c in rivals):
                beaten.append(space)
            interval = cells[CHALLENGER]["median_interval"]
            best = min(rivals, key=lambda c: math.inf if cells[c]["median"] is None else cells[c]["median"])
            if all(below(interval, cells[c]["median_interval"]) for c in rivals):
                verdict = "ahead"
            elif any(below(cells[c]["median_interval"], interval) for c in rivals):
                verdict = "behind"
            else:
                verdict = "within noise"
            versus.append({
                "space": space,
                "evolutionary": {"median": ours, "median_interval": interval},
                "best_kernel_tuner": {"strategy": best[1], "median": cells[best]["median"],
                                      "median_interval": cells[best]["median_interval"]},
                "verdict": verdict,
            })

    return {
        "settings": [{"seeds": seeds, "budget": budget}
                     for seeds, budget in sorted({(obj["seeds"], obj["budget"]) for obj in entries.values()})],
        "columns": [{"tool": tool, "strategy": strategy} for tool, strategy in columns],
        "rows": rows,
        "evolutionary_beats_every_kernel_tuner_strategy": {"spaces": beaten, "count": len(beaten),
                                                           "of": len(compared)},
        "evolutionary_versus_kernel_tuner": versus,
    }


def number(value):
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def cell_text(cell):
    if cell is None:
        return ""
    text = f">{cell['budget']}" if cell["median"] is None else number(cell["median"])
    if cell["ratio_to_random"] is not None:
        bound = "<" if cell["ratio_is_upper_bound"] else ""
        text += f" ({bound}{cell['ratio_to_random']:.2f}×)"
    if cell["success_fraction"] < 1:
        text += f" [{cell['success_fraction']:.0%}]"
    return text


def interval_text(median, interval, budget):
    """`median [low, high]`, with `>budget` for what was not reached."""
    show = lambda v: f">{budget}" if v is None else number(v)
    return f"{show(median)} [{show(interval[0])}, {show(interval[1])}]"


def markdown(table):
    header = ["space"] + [f"{'kt' if c['tool'] == 'kernel_tuner' else c['tool']}:{c['strategy']}" for c in table["columns"]]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in table["rows"]:
        cells = [cell_text(cell) for cell in row["cells"]]
        lines.append("| " + " | ".join([row["space"]] + cells) + " |")
    beats = table["evolutionary_beats_every_kernel_tuner_strategy"]
    settings = ", ".join(f"{s['seeds']} seeds × budget {s['budget']}" for s in table["settings"])
    if len(table["settings"]) > 1:
        settings = f"MIXED, not comparable: {settings}"
    lines += [
        "",
        f"Settings: {settings}.",
        "",
        "Cells: median evaluations to reach within 5% of the optimum (`>B`: not reached by half the seeds within "
        "the budget B), (its ratio to random search's median on that space; `<`: an upper bound, random search's "
        "median being beyond the budget), [share of seeds that reached it, when not all]. `kt:` = Kernel Tuner. "
        "Random reference per space: ktune's `random` if present, else Kernel Tuner's `random_sample`.",
        "",
        f"ktune `evolutionary` has a lower median than every Kernel Tuner strategy on {beats['count']} of "
        f"{beats['of']} spaces" + (f" ({', '.join(beats['spaces'])})." if beats["spaces"] else "."),
    ]
    versus = table["evolutionary_versus_kernel_tuner"]
    if versus:
        budget = table["settings"][0]["budget"] if table["settings"] else "B"
        lines += [
            "",
            "| space | ktune evolutionary, median [95% interval] | best Kernel Tuner strategy | its median [95% interval] | |",
            "|---|---|---|---|---|",
        ]
        for v in versus:
            ours, theirs = v["evolutionary"], v["best_kernel_tuner"]
            lines.append(
                f"| {v['space']} | {interval_text(ours['median'], ours['median_interval'], budget)} | "
                f"{theirs['strategy']} | {interval_text(theirs['median'], theirs['median_interval'], budget)} | "
                f"{v['verdict']} |"
            )
        count = lambda verdict: sum(v["verdict"] == verdict for v in versus)
        lines += [
            "",
            f"Intervals: distribution-free 95% confidence intervals of the medians. ktune `evolutionary`'s lies "
            f"wholly below every Kernel Tuner strategy's on {count('ahead')} of {len(versus)} spaces, wholly above "
            f"some strategy's on {count('behind')}, and overlaps elsewhere.",
        ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="JSON-lines files (kernel_tuner.jsonl, ktune.jsonl, ...)")
    parser.add_argument("--json", action="store_true", help="print the table as JSON instead of Markdown")
    args = parser.parse_args(argv)
    table = build(load(args.files))
    print(json.dumps(table, indent=2) if args.json else markdown(table))


if __name__ == "__main__":
    main()
