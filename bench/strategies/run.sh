#!/usr/bin/env bash
# Strategy benchmark: Kernel Tuner's search strategies and ktune's on the
# recorded tuning spaces, same spaces, budget and seeds; writes
# bench/results/strategies/{kernel_tuner,ktune}.jsonl and prints the table.
# The part `known` (not run by default) writes ktune-known.jsonl: ktune's
# evolutionary search on each space that has recordings on other GPUs,
# started from their winners, as a build with those GPUs' records in its
# database starts; Kernel Tuner has no such start, so it is a table of its own.
#
# Settings (environment):
#   SEEDS=50 BUDGET=1000 JOBS=<cores>   runs per strategy, evaluations per run, Kernel Tuner worker processes
#   SPACES_DIR=<repo>/../shared/data/tuning-spaces
#   KT_STRATEGIES="random_sample ..."   Kernel Tuner strategies (default: all eight, cheapest first)
#   KTUNE_STRATEGIES="random coordinate_descent evolutionary"
#   PARTS="kernel_tuner ktune table"    which steps to run (the Kernel Tuner side takes hours; also `known`)
#   RESULTS_DIR=<repo>/bench/results/strategies
# By default the results are written into the committed results folder.
# Kernel Tuner's seeds are journaled in RESULTS_DIR/kernel_tuner-seeds.jsonl
# as they finish: a stopped run, started again, goes on where it was. A
# journal entry is reused when its space (name and SHA-256 of the file),
# strategy, seed and budget match, so with the default RESULTS_DIR the
# committed Kernel Tuner seeds (bayes_opt's) are read back, not recomputed;
# RESULTS_DIR=<an empty folder> recomputes everything.
# Only the kernel_tuner part uses a virtual environment (bench/strategies/.venv,
# requirements.txt); the table is printed by the system python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
seeds=${SEEDS:-50}
budget=${BUDGET:-1000}
jobs=${JOBS:-$(nproc)}
ktune_strategies=${KTUNE_STRATEGIES:-random coordinate_descent evolutionary}
parts=" ${PARTS:-kernel_tuner ktune table} "
out=${RESULTS_DIR:-$root/bench/results/strategies}
venv="$here/.venv"
mkdir -p "$out"

has_part() { [[ "$parts" == *" $1 "* ]]; }

# The recorded spaces are read by the parts that search them, not by the table.
if has_part kernel_tuner || has_part ktune || has_part known; then
    spaces_setting=${SPACES_DIR:-$root/../shared/data/tuning-spaces}
    if ! spaces_dir=$(cd "$spaces_setting" 2> /dev/null && pwd); then
        echo "error: the tuning spaces folder $spaces_setting does not exist;" \
             "set SPACES_DIR to the folder holding <kernel>/<gpu>.json.gz (shared/data/tuning-spaces)" >&2
        exit 1
    fi
fi

if has_part kernel_tuner; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi

if has_part kernel_tuner; then
    kt_args=()
    if [ -n "${KT_STRATEGIES:-}" ]; then
        read -r -a kt_list <<< "$KT_STRATEGIES"
        kt_args=(--strategies "${kt_list[@]}")
    fi
    echo "Kernel Tuner: $seeds seeds, budget $budget, $jobs jobs" >&2
    "$venv/bin/python" "$here/kernel_tuner_baseline.py" --spaces-dir "$spaces_dir" --seeds "$seeds" \
        --budget "$budget" --jobs "$jobs" "${kt_args[@]}" --journal "$out/kernel_tuner-seeds.jsonl" \
        --out "$out/kernel_tuner.jsonl"
fi

if has_part ktune || has_part known; then
    ktune=(cargo run --quiet --release --manifest-path "$root/Cargo.toml" -p cargo-ktune --features xgboost -- ktune replay)
    if ! "${ktune[@]}" --help > /dev/null; then
        echo "error: could not build or run \`cargo ktune replay\` (cargo-ktune, --release --features xgboost;" \
             "see the cargo output above), which ktune's side of the benchmark needs. The likely cause is the" \
             "xgboost feature: building XGBoost needs cmake and libclang (libclang-dev). Install them with" \
             "\`cargo xtask setup\` (or apt-get install -y cmake libclang-dev) and run this again." >&2
        exit 1
    fi
fi

if has_part ktune; then
    tmp="$out/ktune.jsonl.partial"
    : > "$tmp"
    # Run from the spaces folder so that each line names its space relative to it, as Kernel Tuner's lines do.
    (
        cd "$spaces_dir"
        for space in */*.json.gz; do
            for strategy in $ktune_strategies; do
                echo "ktune: $space $strategy" >&2
                "${ktune[@]}" --space "$space" --strategy "$strategy" --seeds "$seeds" --budget "$budget" --json >> "$tmp"
            done
        done
    )
    mv "$tmp" "$out/ktune.jsonl"
fi

if has_part known; then
    tmp="$out/ktune-known.jsonl.partial"
    : > "$tmp"
    (
        cd "$spaces_dir"
        for space in */*.json.gz; do
            known=()
            for other in "$(dirname "$space")"/*.json.gz; do
                [ "$other" != "$space" ] && known+=(--known "$other")
            done
            [ ${#known[@]} -eq 0 ] && continue
            echo "ktune: $space evolutionary ${known[*]}" >&2
            "${ktune[@]}" --space "$space" --strategy evolutionary "${known[@]}" --seeds "$seeds" --budget "$budget" \
                --json >> "$tmp"
        done
    )
    mv "$tmp" "$out/ktune-known.jsonl"
fi

if has_part table; then
    tables=()
    for f in "$out/ktune.jsonl" "$out/ktune-known.jsonl" "$out/kernel_tuner.jsonl"; do
        [ -f "$f" ] && tables+=("$f")
    done
    if [ ${#tables[@]} -eq 0 ]; then
        echo "error: no results in $out to tabulate" >&2
        exit 1
    fi
    python3 "$here/table.py" "${tables[@]}"
fi
