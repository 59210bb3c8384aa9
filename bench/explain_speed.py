"""Speed of `parasol explain` for DeepSeek-V4-Pro on 8,192 GPUs (problems/deepseek-v4-pro-8192.yaml).

Prints the median wall time of RUNS runs, in-process (load the problem, build the mapping, explain
with conflict and repairs) and end to end through the CLI (`parasol explain … --json` in a fresh
process: interpreter start, imports, the same work, JSON out), for three mappings:

  feasible     seed 000's B (TP1 PP8 CP1 EP64) with full recompute (Megatron needs
               --recompute-method/--recompute-num-layers with it, given as --megatron-args)
  infeasible   the same with VPP 2 (m = 4 < PP 8): conflict plus repairs (drop VPP, set CP=4)
  far          B with VPP 2 as the bundled file has it (recompute none, no flags): memory fails as
               well, so every repair needs two changes and the search runs its second round

Goal: under 1 s. Wall and CPU seconds are both printed: on a shared machine wall time also counts
other processes. Run from the repository root: `python bench/explain_speed.py`.
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from parasol.problems.inputs import explain_inputs, launch_text
from parasol.solver.diagnose.explain import explain

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = str(ROOT / "problems" / "deepseek-v4-pro-8192.yaml")
RECOMPUTE_FLAGS = "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
RUNS = 10
GOAL_S = 1.0
CASES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "feasible": ((), RECOMPUTE_FLAGS),
    "infeasible": (("vpp=2",), RECOMPUTE_FLAGS),
    "far": (("vpp=2",), None),
}


def in_process(sets: tuple[str, ...], flags: str | None) -> tuple[float, float, bool, int]:
    """(wall s, CPU s) of one explain in this process, its verdict and the number of repairs."""
    wall, cpu = time.perf_counter(), time.process_time()
    inputs = explain_inputs(PROBLEM, sets, launch_text(flags, None))
    result = explain(inputs.problem, inputs.mapping)
    return time.perf_counter() - wall, time.process_time() - cpu, result.feasible, len(result.repairs)


def cli(sets: tuple[str, ...], flags: str | None) -> tuple[float, float]:
    """(wall s, CPU s) of `parasol explain PROBLEM --set … [--megatron-args …] --json` in a fresh process."""
    exe = shutil.which("parasol")
    command = [exe] if exe else [sys.executable, "-c", "from parasol.solver.cli import main; main()"]
    command += ["explain", PROBLEM, *(a for s in sets for a in ("--set", s)), "--json"]
    if flags:
        command += ["--megatron-args", flags]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"explain failed ({done.returncode}): {done.stderr.strip()}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return elapsed, cpu


def verdict(seconds: float) -> str:
    """'ok' under the goal, else 'SLOW'."""
    return "ok" if seconds < GOAL_S else "SLOW"


def main() -> None:
    """Print one line per case: median wall and CPU seconds in-process and through the CLI. CPU time
    is shown because wall time on a shared machine also counts other processes."""
    print(f"parasol explain, DeepSeek-V4-Pro on 8,192 GPUs: median of {RUNS} runs, seconds (goal < {GOAL_S:g} s)")
    print(f"  {'case':<11}{'verdict':<24}{'in-process wall/CPU':>22}{'CLI wall/CPU':>18}")
    for name, (sets, flags) in CASES.items():
        in_process(sets, flags)
        runs = [in_process(sets, flags) for _ in range(RUNS)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        _, _, feasible, repairs = runs[0]
        outside = [cli(sets, flags) for _ in range(RUNS)]
        cli_wall, cli_cpu = statistics.median(r[0] for r in outside), statistics.median(r[1] for r in outside)
        label = "feasible" if feasible else f"infeasible, {repairs} repairs"
        print(f"  {name:<11}{label:<24}{wall:>9.3f} / {cpu:.3f} {verdict(wall):<4}"
              f"{cli_wall:>8.3f} / {cli_cpu:.3f} {verdict(cli_wall)}")


if __name__ == "__main__":
    main()
