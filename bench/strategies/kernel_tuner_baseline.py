"""Score Kernel Tuner's search strategies on recorded tuning spaces.

Each strategy runs in Kernel Tuner's simulation mode: a cache file recorded on a
real GPU answers every configuration, so no GPU is needed. For every space,
strategy and seed the run's evaluations are turned into "evaluations until a
configuration within 5% of the optimum" and an anytime score (auc). One JSON
object per (space, strategy) is written to --out as soon as all its seeds are
done. With --journal, each seed's scores are also appended to that file as it
finishes, together with the SHA-256 of the space file it was computed on, and
seeds already there are not run again: a run of hours that is stopped resumes
where it was. A journal entry is reused only when its space name, checksum,
strategy, seed and budget all match, so results computed on another file of the
same name are never mixed in.
"""

import argparse
import contextlib
import functools
import gzip
import hashlib
import json
import math
import random
import sys
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

# Cheapest to simulate first, so that a cut-short run has the most strategies complete.
STRATEGIES = [
    "random_sample",
    "genetic_algorithm",
    "simulated_annealing",
    "greedy_ils",
    "dual_annealing",
    "pso",
    "basinhopping",
    "bayes_opt",
]

TOLERANCE = 1.05


def find_spaces(spaces_dir):
    """Relative paths of all recorded spaces under spaces_dir, sorted."""
    return sorted(p.relative_to(spaces_dir).as_posix() for p in spaces_dir.glob("*/*.json.gz"))


def sha256_of(path):
    """Hex SHA-256 of a file's bytes (a space file as recorded, gzip and all)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_simulation_cache(record, path):
    """Write a plain-JSON Kernel Tuner cache holding each configuration's parameters and mean time.

    Kernel Tuner reads only uncompressed cache files; the strategies look at the
    objective alone, so the other recorded fields are left out to keep loading fast.
    """
    keys = record["tune_params_keys"]
    slim = {
        key: {**{name: entry[name] for name in keys}, "time": entry["time"]}
        for key, entry in record["cache"].items()
    }
    header = {name: record[name] for name in ("device_name", "kernel_name", "problem_size", "tune_params_keys", "tune_params")}
    with open(path, "w") as fh:
        json.dump({**header, "objective": "time", "cache": slim}, fh)


def optimum_of(record):
    """Best (lowest) valid mean time in the space."""
    return min(entry["time"] for entry in record["cache"].values() if not isinstance(entry["time"], str))


@functools.lru_cache(maxsize=None)
def load_simulation_space(cache_path):
    """Header, configuration -> time (None when failed), and a restriction admitting exactly the recorded configurations."""
    from constraint import FunctionConstraint

    with open(cache_path) as fh:
        record = json.load(fh)
    keys = record["tune_params_keys"]
    times = {
        tuple(entry[name] for name in keys): (None if isinstance(entry["time"], str) else entry["time"])
        for entry in record["cache"].values()
    }

    def recorded(*values):
        return values in times

    header = {name: record[name] for name in ("kernel_name", "problem_size", "tune_params_keys", "tune_params")}
    return header, times, FunctionConstraint(recorded)


def tune_once(cache_path, header, restriction, strategy, max_fevals, seed):
    """One Kernel Tuner run; returns its results (configurations served from the cache again appear again)."""
    from kernel_tuner import tune_kernel

    problem_size = header["problem_size"]
    if isinstance(problem_size, list):
        problem_size = tuple(problem_size)
    with warnings.catch_warnings():
        # The recorded spaces name no thread-block parameter for some kernels; that is expected here.
        warnings.filterwarnings("ignore", message="None of the tunable parameters specify thread block dimensions")
        # Failed configurations cost sys.float_info.max, which overflows the strategies' arithmetic
        # (scipy's finite differences, simulated annealing's acceptance probability).
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        # bayes_opt refits its Gaussian process on targets that can all be equal (sklearn then divides by a zero spread).
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="sklearn.gaussian_process")
        results, _ = tune_kernel(
            header["kernel_name"],
            "",
            problem_size,
            [],
            header["tune_params"],
            restrictions=[restriction],
            cache=cache_path,
            simulation_mode=True,
            strategy=strategy,
            strategy_options={"max_fevals": max_fevals},
            quiet=True,
            seed=seed,
        )
    return results


def seed_unseeded_samplers(strategy, seed):
    """Make the samplers that Kernel Tuner creates without a seed draw from one seeded by `seed`.

    bayes_opt builds its initial Latin hypercube sample with scipy's
    LatinHypercube(d) and no rng, which draws fresh entropy on every run.
    """
    if strategy == "bayes_opt":
        from kernel_tuner.strategies import bayes_opt
        from scipy.stats import qmc

        bayes_opt.LatinHypercube = functools.partial(qmc.LatinHypercube, rng=np.random.default_rng(seed))


def run_seed(cache_path, strategy, seed, budget):
    """Times of the distinct configurations one seeded run evaluates, in first-seen order (None = failed).

    Kernel Tuner charges its budget once per distinct configuration, and so does
    this count. A strategy that stops on its own criterion before the budget is
    spent is restarted, with the same options and the random generators running
    on (not reseeded), until `budget` distinct configurations have been
    evaluated or a restart finds nothing new; the sequence is cut at `budget`.
    """
    header, times, restriction = load_simulation_space(cache_path)
    keys = header["tune_params_keys"]
    random.seed(seed)
    np.random.seed(seed)
    seed_unseeded_samplers(strategy, seed)
    seen = {}
    while len(seen) < budget:
        before = len(seen)
        for result in tune_once(cache_path, header, restriction, strategy, budget, seed):
            config = tuple(result[name] for name in keys)
            # Only recorded configurations are evaluations; Kernel Tuner answers anything else as invalid without charging it.
            if config in times:
                seen.setdefault(config, times[config])
        if len(seen) == before:
            break
    return list(seen.values())[:budget]


def evals_to_target(times, optimum):
    """1-based index of the first time within TOLERANCE of the optimum, or None."""
    for index, time in enumerate(times, start=1):
        if time is not None and time <= TOLERANCE * optimum:
            return index
    return None


def anytime_score(times, optimum, budget):
    """(1/budget) * sum over i=1..budget of optimum / best-so-far after i evaluations (0 before any valid one).

    A run that evaluated fewer than `budget` configurations keeps its final best for the rest.
    """
    total = 0.0
    best = math.inf
    for i in range(budget):
        if i < len(times) and times[i] is not None:
            best = min(best, times[i])
        total += optimum / best
    return total / budget


def quantile(values, q):
    """Linear-interpolated quantile with None as +infinity; None when it lands on an unreached seed."""
    ordered = sorted(math.inf if v is None else v for v in values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = math.ceil(position)
    weight = position - low
    value = ordered[low] if weight == 0 else ordered[low] * (1 - weight) + ordered[high] * weight
    return None if math.isinf(value) else value


def score_seed(times, optimum, budget):
    """One seed's scores: evaluations to the target (None: not reached) and anytime score."""
    return {"evals": evals_to_target(times, optimum), "auc": anytime_score(times, optimum, budget)}


def summarize(space, strategy, budget, scores):
    """The JSON line for one (space, strategy) from its per-seed scores, in seed order."""
    evals = [score["evals"] for score in scores]
    return {
        "tool": "kernel_tuner",
        "space": space,
        "strategy": strategy,
        "seeds": len(scores),
        "budget": budget,
        "evals": evals,
        "median": quantile(evals, 0.5),
        "q1": quantile(evals, 0.25),
        "q3": quantile(evals, 0.75),
        "success_fraction": sum(e is not None for e in evals) / len(evals),
        "auc": sum(score["auc"] for score in scores) / len(scores),
    }


def read_journal(path, budget, checksums):
    """Scores already journaled at this budget on these space files, by (space, strategy, seed).

    `checksums` maps each space (its name relative to the spaces folder) to the
    SHA-256 of its file. An entry is reused only when its budget and its
    `space_sha256` match: an entry computed on another file of the same name, or
    one that records no checksum, is skipped (and counted on standard error), and
    its seed is run again. Empty when there is no file.
    """
    done = {}
    if path is None or not path.exists():
        return done
    other_file = set()
    with open(path) as fh:
        for number, line in enumerate(fh, start=1):
            try:
                entry = json.loads(line)
                key = (entry["space"], entry["strategy"], entry["seed"])
                score = {"evals": entry["evals"], "auc": entry["auc"]}
                if entry["budget"] != budget or entry["space"] not in checksums:
                    continue
                if entry.get("space_sha256") == checksums[entry["space"]]:
                    done[key] = score
                else:
                    other_file.add(key)
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                sys.exit(f"{path}:{number}: not a journal entry ({error})")
    rerun = other_file - done.keys()
    if rerun:
        print(f"{path}: {len(rerun)} seeds at budget {budget} are journaled only for other files of the same "
              "name (space_sha256 differs or is missing) and are run again", file=sys.stderr, flush=True)
    return done


def parse_args(argv):
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spaces-dir", type=Path, default=here.parents[2] / "shared" / "data" / "tuning-spaces",
                        help="folder holding <kernel>/<gpu>.json.gz cache files")
    parser.add_argument("--spaces", nargs="+", help="only these spaces (paths relative to --spaces-dir); default all")
    parser.add_argument("--seeds", type=int, default=50, help="seeds 0..N-1 per space and strategy")
    parser.add_argument("--budget", type=int, default=1000, help="distinct evaluations per run")
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES, help="Kernel Tuner strategy names, run in this order")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--out", type=Path, required=True, help="JSON-lines output file (overwritten)")
    parser.add_argument("--journal", type=Path,
                        help="per-seed scores, appended as each seed finishes; seeds found there (same space name and "
                             "file checksum, strategy, seed and budget) are not run again")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    spaces = args.spaces or find_spaces(args.spaces_dir)
    if not spaces:
        sys.exit(f"no *.json.gz spaces under {args.spaces_dir}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kt-baseline-") as tmp, open(args.out, "w") as out:
        cache_paths = {}
        optima = {}
        checksums = {}
        for space in spaces:
            checksums[space] = sha256_of(args.spaces_dir / space)
            with gzip.open(args.spaces_dir / space, "rt") as fh:
                record = json.load(fh)
            cache_paths[space] = str(Path(tmp) / (space.replace("/", "__").removesuffix(".gz")))
            write_simulation_cache(record, cache_paths[space])
            optima[space] = optimum_of(record)

        done = read_journal(args.journal, args.budget, checksums)
        pending = {
            (space, strategy): [done.get((space, strategy, seed)) for seed in range(args.seeds)]
            for strategy in args.strategies
            for space in spaces
        }

        def write_if_complete(key):
            if any(score is None for score in pending[key]):
                return
            line = summarize(*key, args.budget, pending.pop(key))
            out.write(json.dumps(line) + "\n")
            out.flush()
            print(f"{key[0]} {key[1]}: median {line['median']} success {line['success_fraction']:.2f}",
                  file=sys.stderr, flush=True)

        for key in list(pending):
            write_if_complete(key)
        with ProcessPoolExecutor(max_workers=args.jobs) as pool, \
                (open(args.journal, "a") if args.journal else contextlib.nullcontext()) as journal:
            futures = {
                pool.submit(run_seed, cache_paths[space], strategy, seed, args.budget): (space, strategy, seed)
                for (space, strategy), scores in pending.items()
                for seed, score in enumerate(scores)
                if score is None
            }
            for future in as_completed(futures):
                space, strategy, seed = futures[future]
                score = score_seed(future.result(), optima[space], args.budget)
                if journal:
                    entry = {"space": space, "space_sha256": checksums[space], "strategy": strategy, "seed": seed,
                             "budget": args.budget, **score}
                    journal.write(json.dumps(entry) + "\n")
                    journal.flush()
                pending[(space, strategy)][seed] = score
                write_if_complete((space, strategy))

if __name__ == "__main__":
    main()
