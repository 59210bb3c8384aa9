"""`parasol explain` on launch lines as a new user writes them: a catalog model and hardware preset, a GPU count,
sequence length and global batch, and random degrees (`--set tp=… pp=… cp=… ep=… etp=… vpp=… mbs=…
recompute=…`), most of them infeasible, so the verdict, the minimal conflict and the repairs all run.

Prints each line's seconds (in process: loading the problem, building the mapping, the whole explain), its
verdict and repairs, then the median, 90th percentile and slowest seconds, and the lines above SLOW_S. An
input error (exit 2 from the shell) or any other exception is a finding and is printed with its message;
the run exits 1 if there is one. Sessions 46-47 found every slow explain they mended this way (Nemotron-H 8B
at PP16 VPP3 EP4 on 4,096 B200: 112 s; Llama 3.1 70B with EP 16: 15 s for "no repair"; Nemotron-3 Super at
TP8 PP8 VPP3 on 512 GB200: 22 s). The same seed gives the same lines.

Run: python bench/explain_lines.py [--seed 47] [--lines 60]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from parasol.errors import InputError
from parasol.problems.inputs import explain_inputs
from parasol.solver.diagnose.explain import explain

ROOT = Path(__file__).resolve().parents[1]
SLOW_S = 5.0
"""Lines slower than this are listed (a user waits on explain; issue 15: answers in seconds)."""


def random_line(rng: random.Random, models: list[str], presets: list[str]) -> tuple[str, tuple[str, ...], str]:
    """One problem text (catalog model, preset, size, sequence, batch), its `--set` degrees and a label."""
    model, preset = rng.choice(models), rng.choice(presets)
    seq, gbs = rng.choice([2048, 4096, 8192]), rng.choice([64, 256, 512, 1024, 2048])
    gpus = rng.choice([8, 16, 64, 128, 256, 512, 1024, 4096])
    text = (f"model: {model}\ntraining:\n  seq_len: {seq}\n  global_batch: {gbs}\nhardware:\n  preset: {preset}\n"
            f"  gpus: {gpus}\n")
    tp = rng.choice([1, 2, 4, 8])
    degrees = dict(tp=tp, pp=rng.choice([1, 2, 4, 8, 16]), cp=rng.choice([1, 1, 2, 4]),
                   ep=rng.choice([1, 2, 4, 8, 16, 32, 64]), etp=rng.choice([1, tp]), vpp=rng.choice([1, 1, 2, 3, 4]),
                   mbs=rng.choice([1, 1, 2, 4]), recompute=rng.choice(["none", "selective", "full"]))
    return text, tuple(f"{k}={v}" for k, v in degrees.items()), f"{model} on {gpus} {preset}, seq {seq}, GBS {gbs}"


def main() -> None:
    """Explain `--lines` random launch lines and print their seconds and findings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=47)
    parser.add_argument("--lines", type=int, default=60)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    models = sorted(p.stem for p in (ROOT / "problems" / "catalog").glob("*.yaml"))
    presets = sorted(p.stem for p in (ROOT / "hardware" / "presets").glob("*.yaml"))
    seconds: list[float] = []
    findings = 0
    with tempfile.TemporaryDirectory() as folder:
        for i in range(args.lines):
            text, sets, label = random_line(rng, models, presets)
            path = Path(folder) / f"line-{i}.yaml"
            path.write_text(text, encoding="utf-8")
            start = time.perf_counter()
            try:
                inputs = explain_inputs(str(path), sets, None)
                result = explain(inputs.problem, inputs.mapping)
                what = f"{'feasible' if result.feasible else 'infeasible'}, {len(result.repairs)} repair(s)"
            except InputError as error:
                findings += 1
                what = f"INPUT ERROR {error}"
            except Exception as error:  # noqa: BLE001 - a benchmark reports every failure and goes on
                findings += 1
                what = f"FAILED {type(error).__name__}: {error}"
            seconds.append(time.perf_counter() - start)
            print(f"{i:3d} {seconds[-1]:6.2f} s  {label}, {' '.join(sets)}: {what}", flush=True)
    ordered = sorted(seconds)
    slow = sum(s > SLOW_S for s in seconds)
    print(f"{len(seconds)} lines: median {statistics.median(seconds):.2f} s, 90th percentile "
          f"{ordered[int(0.9 * (len(ordered) - 1))]:.2f} s, slowest {ordered[-1]:.2f} s, {slow} above {SLOW_S:g} s, "
          f"total {sum(seconds):.0f} s; {findings} finding(s)")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
