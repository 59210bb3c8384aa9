"""Speed of `parasol solve` (issue 5): CLI start to output on DeepSeek-V4-Pro at 1,024, 8,192 and
131,072 GPUs (median of 5 on this machine), and the solver against the brute-force reference.

`--default-space` (issue 15): problems as a new user writes them (a catalog model, a hardware preset,
no `search:` section) across model families (dense, MoE with and without MTP, DeepSeek-V4) and sizes
(256 to 131,072 GPUs), each solved once in this process: time to the answer, its status, rows listed,
rows screened for memory within the time limit, rows with a cut that fits, rows priced in full (settled
and cut: those no `top` rows cut before dominate by their floor), and the time spent in the CP-SAT master.
`--catalog`: the same for every other catalog model, each at one size.

Run: python bench/solve_speed.py [--runs 5] | python bench/solve_speed.py --default-space|--catalog [--shell] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


CLI = (sys.executable, "-m", "parasol.solver.cli", "solve")
VERDICTS = (0, 1)
"""`solve`'s exit codes that answer the problem (a mapping found, none): any other is an error, not a time."""


def cli_seconds(arguments: tuple[str, ...], runs: int) -> list[float]:
    """Wall seconds of `parasol solve ARGUMENTS` from process start to exit, as a user's runs after the first
    see them: with Python's bytecode caches written (an environment that sets PYTHONDONTWRITEBYTECODE would
    otherwise compile parasol's ~100 modules from source on every run, ~0.2 s), after one run of the bundled
    1,024-GPU problem that writes them. A run that ends in an error (exit code not in VERDICTS) stops the
    benchmark with its message rather than print the time of a failure."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([*CLI, str(ROOT / "problems/deepseek-v4-pro-1024.yaml"), "--json"], check=False,
                   capture_output=True, cwd=ROOT, env=env)
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*CLI, *arguments], check=False, capture_output=True, cwd=ROOT, env=env, text=True)
        out.append(time.perf_counter() - start)
        if done.returncode not in VERDICTS:
            raise SystemExit(f"parasol solve {' '.join(arguments)} exited {done.returncode}, not a verdict (0 or 1), "
                             f"so its time says nothing: {done.stderr.strip()[-500:]}")
    return out


def scaled_problem(source: Path, gpus: int, folder: Path) -> Path:
    """The 8,192-GPU problem with another GPU count (same model, batch and search space)."""
    text = source.read_text(encoding="utf-8").replace("gpus: 8192", f"gpus: {gpus}")
    path = folder / f"deepseek-v4-pro-{gpus}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def reference_ratio(count: int) -> list[tuple[int, float, float]]:
    """(problem, solver seconds, brute-force seconds) on the generated problems of the reference test."""
    from test_solve_reference import GENERATED, AdditiveTime

    from parasol.problems.loader import load_problem_text
    from parasol.solver.search.brute_force import reference_front
    from parasol.solver.search.costs import block_kinds, interval_counts, prefix_counts, row_costs, usable_mb
    from parasol.solver.search.cuts import row_staircase
    from parasol.solver.search.pareto import pareto_search
    from parasol.solver.search.program import compile_program
    from parasol.solver.search.space import enumerate_rows

    out = []
    for i in range(count):
        problem = load_problem_text(GENERATED[i])
        model = AdditiveTime(problem)
        rows = enumerate_rows(problem)
        costs = tuple(row_costs(problem, r, model) for r in rows)
        counts = interval_counts(prefix_counts(problem, block_kinds(problem)))
        usable = usable_mb(problem)
        start = time.perf_counter()
        stairs = tuple(row_staircase(c, counts, usable) for c in costs)
        if any(s.points for s in stairs):
            pareto_search(compile_program(problem, rows, costs, stairs), 1, 600)
        solver = time.perf_counter() - start
        start = time.perf_counter()
        reference_front(problem, costs, counts, usable)
        out.append((i, solver, time.perf_counter() - start))
    return out


V4_LINES = ("  packed_sequences: true\nframework:\n  rule_packs: [megatron-core, deepseek-v4]\n"
            "  options:\n    cp_partition_mode: contiguous\n")
"""What a DeepSeek-V4 problem adds: packed sequences and the V4 rule pack with its CP sharding."""
DEFAULT_SPACE = (
    # (name, catalog model, preset, GPUs, seq_len, global batch, precision, optimizer, extra lines)
    ("qwen3-235b-256", "qwen3-235b-a22b", "h100-hgx", 256, 4096, 1024, "bf16", "adam", ""),
    ("mixtral-8x22b-512", "mixtral-8x22b", "h100-hgx", 512, 4096, 2048, "bf16", "adam", ""),
    ("deepseek-v3-2048", "deepseek-v3", "h800-hgx", 2048, 4096, 15360, "fp8", "adam", ""),
    ("gpt-3-175b-4096", "gpt-3-175b", "a100-hgx", 4096, 2048, 1536, "bf16", "adam", ""),
    ("deepseek-v4-pro-8192", "deepseek-v4-pro", "h800-hgx", 8192, 8192, 4096, "bf16", "muon",
     V4_LINES),
    ("llama-3.1-405b-16384", "llama-3.1-405b", "h100-hgx", 16384, 8192, 2048, "bf16", "adam", ""),
    ("deepseek-v4-flash-32768", "deepseek-v4-flash", "h800-hgx", 32768, 8192, 8192, "bf16", "muon", V4_LINES),
    ("deepseek-v4-pro-131072", "deepseek-v4-pro", "h800-hgx", 131072, 8192, 65536, "bf16", "muon", V4_LINES),
)
"""The default-space set: what a user writes first for each family and size (no `search:` section)."""
CATALOG_SPACE = (
    ("kimi-k2-2048", "kimi-k2", "h800-hgx", 2048, 4096, 4096, "fp8", "adam", ""),
    ("deepseek-v2-1024", "deepseek-v2", "h800-hgx", 1024, 4096, 4608, "bf16", "adam", ""),
    ("deepseek-v3.1-1024", "deepseek-v3.1", "h800-hgx", 1024, 4096, 8192, "fp8", "adam", ""),
    ("nemotron-3-ultra-4096", "nemotron-3-ultra-550b-a55b", "h100-hgx", 4096, 8192, 4096, "bf16", "adam", ""),
    ("nemotron-3-super-1024", "nemotron-3-super-120b-a12b", "h100-hgx", 1024, 8192, 2048, "bf16", "adam", ""),
    ("nemotron-3-nano-256", "nemotron-3-nano-30b-a3b", "h100-hgx", 256, 8192, 1024, "bf16", "adam", ""),
    ("gpt-oss-120b-512", "gpt-oss-120b", "h100-hgx", 512, 4096, 2048, "bf16", "adam", ""),
    ("qwen3-30b-a3b-128", "qwen3-30b-a3b", "h100-hgx", 128, 4096, 512, "bf16", "adam", ""),
    ("mixtral-8x7b-256", "mixtral-8x7b", "h100-hgx", 256, 4096, 1024, "bf16", "adam", ""),
    ("nemotron-4-340b-6144", "nemotron-4-340b", "h100-hgx", 6144, 4096, 2304, "bf16", "adam", ""),
    ("llama-3.1-70b-1024", "llama-3.1-70b", "h100-hgx", 1024, 8192, 1024, "bf16", "adam", ""),
    ("llama-2-7b-64", "llama-2-7b", "a100-hgx", 64, 4096, 1024, "bf16", "adam", ""),
    ("gpt-3-20b-512", "gpt-3-20b", "a100-hgx", 512, 2048, 1024, "bf16", "adam", ""),
    ("nemotron-h-8b-256", "nemotron-h-8b", "h100-hgx", 256, 8192, 768, "bf16", "adam", ""),
    ("moe-5t-16384", "moe-5t", "gb200-nvl72", 16384, 8192, 8192, "fp8", "adam", ""),
    ("deepseek-v4-pro-16384", "deepseek-v4-pro", "gb200-nvl72", 16384, 8192, 8192, "bf16", "muon", V4_LINES),
    ("qwen3-235b-1024", "qwen3-235b-a22b", "b200-hgx", 1024, 4096, 2048, "bf16", "adam", ""),
    ("llama-3.1-405b-2048", "llama-3.1-405b", "h100-hgx", 2048, 8192, 1024, "bf16", "adam", ""),
)
"""The catalog set: the other catalog models, each at a plausible size and preset, written the same way."""


def default_space_text(model: str, preset: str, gpus: int, seq: int, gbs: int, precision: str, optimizer: str,
                       extra: str) -> str:
    """A problem file as a new user writes it: catalog model, preset, training run, nothing else."""
    return (f"model: {model}\ntraining:\n  seq_len: {seq}\n  global_batch: {gbs}\n  precision: {precision}\n"
            f"  optimizer: {optimizer}\n{extra.split('framework:')[0]}hardware:\n  preset: {preset}\n"
            f"  gpus: {gpus}\n" + ("framework:" + extra.split("framework:")[1] if "framework:" in extra else ""))


def default_space(problems: tuple[tuple, ...], only: list[str] | None, time_limit: float, shell: bool) -> None:
    """Solve each problem of `problems` once in this process and print its figures; `shell`: then once more from
    the shell as a user types it (`parasol solve FILE --time-limit T`: imports, search, explain and the
    printed table), the issue's measure."""
    import parasol.solver.search.solve as solve_module
    from parasol.constraints.physics.step_time import CalibratedStageTimes
    from parasol.problems.loader import load_problem_text

    master = [0.0]
    search = solve_module.pareto_search

    def timed_search(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a pass-through timer
        start = time.perf_counter()
        try:
            return search(*args, **kwargs)
        finally:
            master[0] += time.perf_counter() - start

    solve_module.pareto_search = timed_search
    print(f"{'problem':<26} {'status':>8} {'time s':>7} {'rows':>7} {'screened':>8} {'fitting':>7} {'cut':>6} "
          f"{'master s':>8}{' shell s' if shell else ''}  best step / memory, gap to the space's bound")
    for name, *spec in problems:
        if only and not any(part in name for part in only):
            continue
        problem = load_problem_text(default_space_text(*spec))
        master[0] = 0.0
        start = time.perf_counter()
        result = solve_module.solve(problem, CalibratedStageTimes(problem), top=10, time_limit_s=time_limit)
        seconds = time.perf_counter() - start
        best = min(result.mappings, key=lambda m: m.front_values.get("step_time", 0), default=None)
        what = "-" if best is None else " / ".join(f"{v:.3f}" for v in best.front_values.values())
        if result.mappings:
            gap = result.mappings[0].gap
            what += ", gap " + ("unbounded (rows unscreened)" if gap is None else f"{100 * gap:.1f}%")
        from_shell = ""
        if shell:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / f"{name}.yaml"
                path.write_text(default_space_text(*spec), encoding="utf-8")
                from_shell = f" {cli_seconds((str(path), '--time-limit', f'{time_limit:g}'), 1)[0]:7.2f}"
        print(f"{name:<26} {result.status:>8} {seconds:7.2f} {result.rows:7,} {result.rows_screened:8,} {result.rows_fitting:7,} "
              f"{result.rows_cut:6,} {master[0]:8.2f}{from_shell}  {what}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reference", type=int, default=6, help="generated problems to compare")
    parser.add_argument("--default-space", action="store_true", help="the default-space set (issue 15)")
    parser.add_argument("--only", nargs="*", help="default-space problems whose name contains one of these")
    parser.add_argument("--time-limit", type=float, default=600.0, help="default-space solve time limit (s)")
    parser.add_argument("--shell", action="store_true", help="default-space: also time each from the shell")
    parser.add_argument("--catalog", action="store_true", help="the catalog set (the other catalog models)")
    args = parser.parse_args()
    if args.default_space or args.catalog:
        default_space(CATALOG_SPACE if args.catalog else DEFAULT_SPACE, args.only, args.time_limit, args.shell)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = [("1,024", ROOT / "problems/deepseek-v4-pro-1024.yaml"),
                 ("8,192", ROOT / "problems/deepseek-v4-pro-8192.yaml"),
                 ("131,072", scaled_problem(ROOT / "problems/deepseek-v4-pro-8192.yaml", 131072, folder))]
        print(f"{'GPUs':>8}  {'median s':>9}  runs")
        medians = {}
        for label, path in cases:
            seconds = cli_seconds((str(path), "--json"), args.runs)
            medians[label] = statistics.median(seconds)
            print(f"{label:>8}  {medians[label]:9.2f}  {', '.join(f'{s:.2f}' for s in seconds)}")
        print(f"131,072 / 8,192 time ratio: {medians['131,072'] / medians['8,192']:.2f}")
    print("\nsolver vs brute-force reference (same cost tables; generated problems of tests/test_solve_reference.py)")
    print(f"{'problem':>7}  {'solver s':>8}  {'brute s':>8}  ratio")
    for i, solver, brute in reference_ratio(args.reference):
        print(f"{i:>7}  {solver:8.2f}  {brute:8.2f}  {solver / brute:5.2f}")


if __name__ == "__main__":
    main()
