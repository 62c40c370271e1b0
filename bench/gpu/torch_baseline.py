#!/usr/bin/env python3
"""Times PyTorch (eager) and torch.compile(mode="max-autotune...") on
ktune-bench's cases, by the same rules as ktune-bench: inputs drawn like
ktune's (magnitudes uniform in [0.25, 2], random signs) and rotated across
enough copies to exceed twice the L2 cache, CUDA events around each run,
runs queued behind a large memset so they execute back to back, two
warm-up runs, then 20 to 200 timed runs filling about 400 ms (5 to 20 and
50 ms with --quick); median, p10 and p90.

The cases come from `ktune-bench --list` (one catalogue, in Rust). Writes
JSON beside ktune-bench's results (default $OUT/torch.json) and prints a
Markdown table; with --bench, the ktune results file, the table also shows
torch's time over ktune's fastest (of its default, bounded, sampled and
searched schedules; > 1: ktune faster).

Without torch or without a GPU it writes {"skipped": reason}, says so and
exits 0: the torch numbers are a comparison, not a check.

The compiled mode defaults to "max-autotune-no-cudagraphs": the same
autotuning as "max-autotune", without CUDA graphs, which would copy each
rotated input into the graph's static buffers inside the timed region.
Pass --mode max-autotune to time with graphs anyway.
"""

import argparse
import datetime
import json
import math
import os
import sys
import time

QUEUE_AHEAD_BYTES = 2 << 30
BATCH = 16


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases-json", required=True, help="output of `ktune-bench --list`")
    p.add_argument("--out", help="results file (default $OUT/torch.json, else torch.json)")
    p.add_argument("--bench", help="ktune-bench's results, for the ratio column")
    p.add_argument("--budget-s", type=float, default=110.0,
                   help="wall-clock seconds; compiling stops when they are spent")
    p.add_argument("--mode", default="max-autotune-no-cudagraphs")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--quick", action="store_true")
    return p.parse_args()


def write(path, results):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=2)


def summarize(ms):
    s = sorted(ms)
    n = len(s)
    at = lambda q: s[min(n - 1, round(q * (n - 1)))]
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"median_ms": median, "p10_ms": at(0.1), "p90_ms": at(0.9),
            "min_ms": s[0], "max_ms": s[-1], "reps": n}


class Timer:
    def __init__(self, torch, quick):
        self.torch = torch
        self.scratch = torch.empty(QUEUE_AHEAD_BYTES, dtype=torch.uint8, device="cuda")
        self.min_reps, self.max_reps, self.cap_ms = (5, 20, 50.0) if quick else (20, 200, 400.0)

    def time(self, fn, first, reps):
        torch = self.torch
        out = []
        done = 0
        while done < reps:
            batch = min(BATCH, reps - done)
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(batch)]
            self.scratch.zero_()
            for i, (start, end) in enumerate(events):
                start.record()
                fn(first + done + i)
                end.record()
            torch.cuda.synchronize()
            out.extend(start.elapsed_time(end) for start, end in events)
            done += batch
        return out

    def measure(self, fn):
        probe = max(min(self.time(fn, 0, 2)), 1e-4)
        fill = int(self.cap_ms / probe)
        ceiling = max(3, int(2 * self.cap_ms / probe))
        reps = min(max(fill, self.min_reps), self.max_reps, ceiling)
        return summarize(self.time(fn, 2, reps))


def inputs(torch, case, l2_bytes):
    """The case's input sets (copies rotated by the timed runs) and its function."""
    import torch.nn.functional as F

    kind, shape = case["kind"], case["shape"]
    dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[case["dtype"]]

    def rand(*size, dtype=dt):
        x = torch.empty(*size, device="cuda", dtype=torch.float32).uniform_(0.25, 2.0)
        sign = torch.randint(0, 2, size, device="cuda", dtype=torch.int8) * 2 - 1
        return (x * sign).to(dtype)

    if kind == "matmul":
        batch = [shape["B"]] if "B" in shape else []
        tensors = [rand(*batch, shape["M"], shape["K"]), rand(*batch, shape["K"], shape["N"])]
        fn = lambda a, b: torch.matmul(a, b)
    elif kind == "matmul_bias_gelu":
        tensors = [rand(shape["M"], shape["K"]), rand(shape["K"], shape["N"]),
                   rand(shape["N"], dtype=torch.float32)]
        fn = lambda x, w, b: F.gelu(torch.matmul(x, w).float() + b, approximate="tanh").to(x.dtype)
    elif kind == "matmul_epilogue" and case["name"] == "demo_ffn_up":
        tensors = [rand(shape["M"], shape["K"]), rand(shape["K"], shape["N"]),
                   rand(shape["N"], dtype=torch.float32)]
        fn = lambda h, w, b: F.gelu(torch.matmul(h, w).float() + b, approximate="tanh")
    elif kind == "matmul_epilogue" and case["name"] == "demo_ffn_down":
        tensors = [rand(shape["M"], shape["K"]), rand(shape["K"], shape["N"]), rand(shape["N"]),
                   rand(shape["M"], shape["N"])]
        fn = lambda g, w, b, x: torch.matmul(g, w) + b + x
    elif kind == "softmax":
        tensors = [rand(shape["R"], shape["C"])]
        fn = lambda x: torch.softmax(x, dim=-1)
    elif kind == "elementwise" and case["name"].startswith("bias_gelu"):
        tensors = [rand(shape["M"], shape["N"]), rand(shape["N"], dtype=torch.float32)]
        fn = lambda h, b: F.gelu(h.float() + b, approximate="tanh").to(h.dtype)
    elif kind == "layer_norm":
        d = shape["D"]
        tensors = [rand(shape["T"], d), rand(d), rand(d)]
        fn = lambda x, g, b: F.layer_norm(x, (d,), g, b, eps=1e-5)
    else:
        raise ValueError(f"unknown kind {kind} of case {case['name']}")
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    copies = max(2, math.ceil(2 * l2_bytes / nbytes))
    sets = [tensors] + [[t.clone() for t in tensors] for _ in range(copies - 1)]
    return sets, fn


def rates(times, flops_bytes):
    """TFLOP/s and GB/s from ktune's counts of the case (None without them)."""
    flops, nbytes = flops_bytes
    ms = times["median_ms"]
    return {"tflops": flops / (ms * 1e9) if flops else None,
            "gbps": nbytes / (ms * 1e6) if nbytes else None}


def main():
    args = parse_args()
    out = args.out or os.path.join(os.environ.get("OUT", "."), "torch.json")
    start = time.monotonic()
    try:
        import torch
    except ImportError as e:
        write(out, {"skipped": f"torch is not installed ({e})"})
        print(f"torch_baseline: skipped: torch is not installed ({e})")
        return 0
    if not torch.cuda.is_available():
        write(out, {"skipped": "torch sees no CUDA GPU"})
        print("torch_baseline: skipped: torch sees no CUDA GPU")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    with open(args.cases_json) as f:
        cases = json.load(f)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    ktune = {}
    if args.bench and os.path.exists(args.bench):
        with open(args.bench) as f:
            ktune = {c["name"]: c for c in json.load(f).get("cases", [])}
    results = {
        "tool": "torch_baseline.py",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "compile_mode": None if args.no_compile else args.mode,
        "budget_s": args.budget_s, "quick": args.quick, "cases": [],
    }
    timer = Timer(torch, args.quick)

    # Eager first, for every case (cheap); then compiled, while the budget lasts.
    for case in cases:
        entry = {"name": case["name"], "kind": case["kind"], "dtype": case["dtype"],
                 "shape": case["shape"], "eager": None, "compiled": None, "errors": []}
        results["cases"].append(entry)
        k = ktune.get(case["name"], {})
        flops_bytes = (k.get("flops", 0), k.get("bytes", 0))
        try:
            sets, fn = inputs(torch, case, l2)
            times = timer.measure(lambda i: fn(*sets[i % len(sets)]))
            entry["eager"] = {"times": times, **rates(times, flops_bytes)}
        except Exception as e:  # a failed case is recorded, the rest still run
            entry["errors"].append(f"eager: {type(e).__name__}: {e}")
        finally:
            sets = None
            torch.cuda.empty_cache()
        write(out, results)

    skipped = []
    for entry, case in zip(results["cases"], cases):
        if args.no_compile:
            break
        if time.monotonic() - start > args.budget_s:
            skipped.append(case["name"])
            continue
        k = ktune.get(case["name"], {})
        try:
            sets, fn = inputs(torch, case, l2)
            compiled = torch.compile(fn, mode=args.mode)
            began = time.monotonic()
            want = fn(*sets[0])
            got = compiled(*sets[0])
            torch.cuda.synchronize()
            compile_s = time.monotonic() - began
            rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
            times = timer.measure(lambda i: compiled(*sets[i % len(sets)]))
            entry["compiled"] = {"times": times, "compile_s": compile_s,
                                 "rel_error_vs_eager": rel,
                                 **rates(times, (k.get("flops", 0), k.get("bytes", 0)))}
        except Exception as e:
            entry["errors"].append(f"compiled: {type(e).__name__}: {e}")
        finally:
            sets = None
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        write(out, results)
    results["compile_skipped_for_budget"] = skipped
    write(out, results)

    def ms(m):
        return f"{m['times']['median_ms']:.3f}" if m else "—"

    def ratio(entry, which):
        # ktune's fastest: its default, bounded, sampled, alternative or
        # searched schedule.
        case = ktune.get(entry["name"]) or {}
        times = [case[k]["times"]["median_ms"]
                 for k in ("default", "tuned", "best", "alternative", "searched")
                 if case.get(k)]
        m = entry[which]
        if not times or not m:
            return "—"
        return f"{m['times']['median_ms'] / min(times):.2f}"

    print(f"\ntorch {torch.__version__} on {props.name}; compiled = torch.compile(mode={args.mode!r}); "
          "ratios are torch time / ktune's fastest time (> 1: ktune faster)\n")
    print("| case | eager ms | compiled ms | eager/ktune | compiled/ktune | notes |")
    print("|---|---|---|---|---|---|")
    for entry in results["cases"]:
        notes = "; ".join(entry["errors"])
        if entry["name"] in skipped:
            notes = (notes + "; " if notes else "") + "compile skipped (budget)"
        print(f"| {entry['name']} | {ms(entry['eager'])} | {ms(entry['compiled'])} | "
              f"{ratio(entry, 'eager')} | {ratio(entry, 'compiled')} | {notes} |")
    print(f"\ntorch_baseline: results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
