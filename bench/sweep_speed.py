"""Speed of `parasol sweep` (issue 6): nine sizes of DeepSeek-V4-Pro (problems/deepseek-v4-pro-1024.yaml,
256 to 65,536 GPUs, strong scaling at GBS 4,096), CLI start to output, median of N runs with the local
process pool and with the Ray backend (a local Ray started by each run), one serial run for the
parallel speed-up; checks that every backend gives the same answers and prints the per-size solve
times and seed 000's 1,024 → 8,192 story.

With --default-space it times instead one sweep of the same nine sizes of a DeepSeek-V4-Pro problem as a
new user writes it (catalog model, preset, no `search:` section; bench/solve_speed.py's default-space text)
on the local pool, and prints each size's status, solve seconds and best step (issue 15's target: 30 s).

Run: python bench/sweep_speed.py [--runs 3] [--no-ray] [--default-space [--time-limit S]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = "problems/deepseek-v4-pro-1024.yaml"
SIZES = "256..65536x2"


def cli_sweep(backend: str, problem: str | Path = PROBLEM, *extra: str) -> tuple[float, dict]:
    """Wall seconds of `parasol sweep PROBLEM --gpus SIZES --backend B --json [extra]` and its JSON."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "parasol.solver.cli", "sweep", str(problem), "--gpus", SIZES,
                           "--backend", backend, "--json", *extra], check=True, capture_output=True, text=True,
                          cwd=ROOT)
    return time.perf_counter() - start, json.loads(done.stdout)


def default_space_sweep(time_limit: float) -> None:
    """One local-pool sweep of nine sizes of DeepSeek-V4-Pro written as a new user writes it."""
    sys.path.insert(0, str(ROOT / "bench"))
    from solve_speed import DEFAULT_SPACE, default_space_text

    _, *spec = next(s for s in DEFAULT_SPACE if s[0] == "deepseek-v4-pro-8192")
    spec[2] = 1024
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "deepseek-v4-pro-default-space.yaml"
        problem.write_text(default_space_text(*spec))
        seconds, data = cli_sweep("local", problem, "--time-limit", f"{time_limit:g}")
    print(f"nine sizes ({SIZES}) of DeepSeek-V4-Pro, default space, local pool ({data['run']['workers']} workers), "
          f"CLI start to output: {seconds:.2f} s")
    print(f"{'GPUs':>7}  {'status':<10} {'solve s':>7}  best")
    for size in data["sizes"]:
        best = size.get("best") or {}
        print(f"{size['gpus']:>7,}  {size['status']:<10} {size['search']['seconds']:7.2f}  "
              f"{best.get('label', '-')} {best.get('step_time_s', float('nan')):.3f} s")


def timed(backend: str, runs: int) -> tuple[list[float], list[dict]]:
    """Wall seconds and JSON of `runs` sweeps on one backend."""
    seconds, outputs = [], []
    for _ in range(runs):
        s, data = cli_sweep(backend)
        seconds.append(s)
        outputs.append(data)
    return seconds, outputs


def first_difference(a: object, b: object, path: str = "") -> str | None:
    """The JSON path where two answers first differ, or None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((f for i, (x, y) in enumerate(zip(a, b, strict=True))
                     if (f := first_difference(x, y, f"{path}[{i}]"))), None)
    return None if a == b else f"{path}: {str(a)[:80]} != {str(b)[:80]}"


def story(data: dict) -> None:
    """Seed 000's story: the problem's mapping (A at 1,024 GPUs is B at 8,192) and the best mapping,
    m and bubble from 1,024 to 8,192 GPUs, then the comparison at 8,192."""
    print("\nseed 000, GBS 4,096: m and bubble of the problem's mapping (A/B) and of the best mapping")
    print(f"{'GPUs':>7}  {'A/B m':>6} {'bubble':>7} {'step s':>7}   {'best':<26} {'m':>4} {'bubble':>7} {'step s':>7}")
    for s in data["sizes"]:
        if not 1024 <= s["gpus"] <= 8192:
            continue
        mine, best = s["reference"]["mapping"], s["best"]
        print(f"{s['gpus']:>7,}  {mine['num_microbatches']:>6} {mine['bubble_fraction']:>7.1%} "
              f"{mine['step_time_s']:>7.3f}   {best['label']:<26} {best['num_microbatches']:>4} "
              f"{best['bubble_fraction']:>7.1%} {best['step_time_s']:>7.3f}")
    for note in data["notes"]:
        if note.startswith("8,192 GPUs: best"):
            print(note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray backend")
    parser.add_argument("--default-space", action="store_true", help="one default-space sweep (issue 15)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="the default-space sweep's time limit (s)")
    args = parser.parse_args()
    if args.default_space:
        default_space_sweep(args.time_limit)
        return
    from parasol.solver.sweep.run import answers

    backends = ["local", *([] if args.no_ray else ["ray"])]
    results = {b: timed(b, args.runs) for b in backends}
    serial_s, serial = cli_sweep("serial")
    print(f"nine sizes ({SIZES}) of {PROBLEM}, CLI start to output")
    print(f"{'backend':>8}  {'median s':>9}  runs")
    for b, (seconds, _) in results.items():
        print(f"{b:>8}  {statistics.median(seconds):9.2f}  {', '.join(f'{s:.2f}' for s in seconds)}")
    print(f"{'serial':>8}  {serial_s:9.2f}  (one run, one size after another)")
    reference = answers(serial)
    differences = [f"{b} run {i + 1}: {d}" for b, (_, outs) in results.items() for i, out in enumerate(outs)
                   if (d := first_difference(reference, answers(out)))]
    same = not differences
    print(f"identical answers on every backend and run: {'yes' if same else 'NO'}")
    for line in differences:
        print(f"  differs from serial at {line}")
    first = results["local"][1][0]
    print(f"\nper-size solve seconds (local run 1, {first['run']['workers']} workers; serial run)")
    for s, t in zip(first["sizes"], serial["sizes"], strict=True):
        print(f"{s['gpus']:>7,}  {s['status']:<10} {s['search']['seconds']:6.2f}  {t['search']['seconds']:6.2f}")
    story(first)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
