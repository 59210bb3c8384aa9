"""How well the step-time model predicts runs it was not fitted on, and seed 000's A/B/C with breakdowns.

    python bench/step_time_cv.py [RUNS.yaml]

Leave-one-model-out cross-validation over the measured runs (default
reference/measured-configs.yaml): for every GPU type and every model measured on it, the
coefficients are fitted on that GPU type's other models and the held-out model's runs are predicted.
Prints, overall, by family (transformer = dense + MoE, hybrid Mamba-2 / gated DeltaNet), by GPU type and
by GEMM precision: the median |error| of held-out tokens/s/GPU and its signed bias, the share within 10%,
and over the ranking groups (one workload measured under several mappings) the median Spearman rho and
the share of groups whose measured best mapping is predicted best; then every ranking group, the error
per (model, GPU type), the in-sample error of the bundled fit, the runs left out and why, and seed 000's
configurations A, B and C on DeepSeek-V4-Pro with their predicted step time and breakdown.
Targets (issue 16): median |error| <= 10%, in-group Spearman >= 0.9, measured best predicted best in >= 70%
of groups.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from parasol.constraints.physics.pricing import BREAKDOWN_KINDS
from parasol.constraints.physics.step_time import StepTime, step_time
from parasol.hardware.calibration import read_runs
from parasol.problems.derived import derive
from parasol.problems.loader import load_problem
from parasol.problems.mapping import Mapping
from parasol.solver.calibrate import (
    ASSUMPTIONS,
    FIT_NAMES,
    HeldOut,
    PreparedRun,
    family,
    fit_all,
    held_out_predictions,
    leave_one_model_out,
    prepare_runs,
    ranking_groups,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ROOT / "reference" / "measured-configs.yaml"


def median(values: list[float] | np.ndarray) -> float:
    """Median of a non-empty sequence, NaN when empty."""
    return float(np.median(values)) if len(values) else float("nan")


def fidelity_row(label: str, runs: list[PreparedRun], predicted: dict[str, float]) -> str:
    """One line of figures for a set of runs: median |error| and signed bias of held-out tokens/s/GPU, the
    share within 10%, and over its ranking groups the median Spearman rho and the share whose measured
    best mapping is predicted best."""
    if not runs:
        return f"  {label:22s}    0"
    err = np.array([predicted[r.run.id] / r.measured - 1 for r in runs]) * 100
    groups = ranking_groups(runs, predicted)
    rho = median([g.spearman for g in groups]) if groups else float("nan")
    best = np.mean([g.best_found for g in groups]) if groups else float("nan")
    return (f"  {label:22s} {len(runs):4d} {median(np.abs(err)):9.1f} {median(err):+9.1f} {np.mean(np.abs(err) <= 10):8.0%}"
            f" {len(groups):7d} {rho:7.2f} {best:7.0%}")


def print_fidelity(kept: list[PreparedRun], held: list[HeldOut]) -> None:
    """Held-out figures overall, by family and by GPU type, then the ranking groups one by one."""
    predicted = held_out_predictions(held)
    print(f"Leave-one-model-out: {len(kept)} runs, {len(held)} (model, GPU type) groups; a ranking group is one "
          "workload (model, GPU type and count, sequence, precision, task, release) under >= 2 mappings.")
    print(f"  {'runs':22s} {'n':>4s} {'|err| %':>9s} {'bias %':>9s} {'<=10%':>8s} {'groups':>7s} {'rho':>7s} "
          f"{'best':>7s}")
    fam = {r.run.id: family(r) for r in kept}
    rows = [("all", kept), ("transformer", [r for r in kept if fam[r.run.id] != "hybrid"]),
            ("  dense", [r for r in kept if fam[r.run.id] == "dense"]),
            ("  MoE", [r for r in kept if fam[r.run.id] == "moe"]),
            ("hybrid (Mamba-2/GDN)", [r for r in kept if fam[r.run.id] == "hybrid"])]
    rows += [(f"GPU {g}", [r for r in kept if r.gpu_file == g]) for g in sorted({r.gpu_file for r in kept})]
    rows += [(f"precision {p}", [r for r in kept if r.settings.precision == p])
             for p in sorted({r.settings.precision for r in kept})]
    for label, runs in rows:
        print(fidelity_row(label, runs, predicted))
    print("\nRanking groups (held-out predictions; * = measured best predicted best):")
    for g in ranking_groups(kept, predicted):
        order = "  ".join(f"{m:.0f}/{p:.0f}" for m, p in zip(g.measured, g.predicted, strict=True))
        print(f"  {'*' if g.best_found else ' '} {' '.join(str(k) for k in g.key if k):70.70s} rho {g.spearman:+.2f}  "
              f"measured/predicted {order}")


def print_by_model(held: list[HeldOut]) -> None:
    """Held-out median error per (model, GPU type)."""
    print("\nBy (model, GPU type), held-out:")
    for h in sorted(held, key=lambda h: (h.model_id, h.gpu_file)):
        err = (np.array(h.predicted) / np.array(h.measured) - 1) * 100
        print(f"  {h.model_id:28s} {h.gpu_file:6s} {len(err):3d} runs  |err| {median(np.abs(err)):5.1f}%  "
              f"bias {median(err):+6.1f}%")


def print_in_sample(runs: list) -> None:
    """The error of the fit on all runs of each GPU type (what the bundled files were fitted to)."""
    fits = fit_all(runs)
    ape = np.concatenate([f.ape for f in fits.values()])
    print(f"\nIn-sample fit (all models of each GPU type): median APE {median(ape):.1f}%")
    for gpu, f in fits.items():
        print(f"  {gpu:6s} {len(f.measured):4d} runs  median APE {f.mape:5.1f}%   "
              + "  ".join(f"{n}={getattr(f.coefficients, n):.3g}" for n in FIT_NAMES))


def print_exclusions(dropped: list) -> None:
    """How many runs were left out, by reason."""
    print(f"\nExcluded runs: {len(dropped)}")
    for reason, count in Counter(d.reason for d in dropped).most_common():
        print(f"  {count:3d}  {reason}")


def seed_step(gpus: int, cp: int) -> StepTime:
    """Seed 000's configuration on DeepSeek-V4-Pro: A (1,024 GPUs), B (8,192) or C (8,192, CP4)."""
    problem = load_problem(ROOT / "problems" / f"deepseek-v4-pro-{gpus}.yaml")
    mapping = Mapping(gpus=gpus, tp=1, pp=8, cp=cp, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192)
    return step_time(problem, mapping, derive(problem.model, mapping))


def print_seed() -> None:
    """A, B and C with their breakdowns, and C − B by kind."""
    steps = {"A": seed_step(1024, 1), "B": seed_step(8192, 1), "C": seed_step(8192, 4)}
    print(f"\nSeed 000, DeepSeek-V4-Pro on H800 (HGX, 8 GPUs/node, 400G IB), BF16, PP8 EP64 TP1 MBS1 GBS4096 "
          f"S8192 ({steps['A'].coefficients}):")
    print(f"  {'':34s}" + "".join(f"{k:>11s}" for k in steps) + f"{'C − B':>11s}")
    rows = [("step time (s)", {k: s.step_time_s for k, s in steps.items()})]
    rows += [(f"  {kind}", {k: s.breakdown[kind] for k, s in steps.items()}) for kind in BREAKDOWN_KINDS]
    rows += [("  of compute: grouped-GEMM loss", {k: s.grouped_gemm_loss_s for k, s in steps.items()}),
             ("  of compute: fixed per-block cost", {k: s.compute_parts["overhead"] for k, s in steps.items()})]
    for label, values in rows:
        print(f"  {label:34s}" + "".join(f"{v:11.3f}" for v in values.values()) + f"{values['C'] - values['B']:11.3f}")
    for key, label in (("tokens_per_s_per_gpu", "tokens/s/GPU"), ("mfu", "MFU (BF16 dense peak)")):
        print(f"  {label:34s}" + "".join(f"{getattr(s, key):11.3f}" for s in steps.values()))
    b, c = steps["B"], steps["C"]
    extra = sum(c.breakdown[k] - b.breakdown[k] for k in ("tp", "cp", "ep", "pp", "dp_dense", "dp_expert",
                                                         "optimizer"))
    loss = c.grouped_gemm_loss_s - b.grouped_gemm_loss_s
    overhead = c.compute_parts["overhead"] - b.compute_parts["overhead"]
    saved = b.breakdown["bubble"] - c.breakdown["bubble"]
    verdict = "faster" if c.step_time_s < b.step_time_s else "slower"
    print(f"  C is {verdict} than B by {abs(c.step_time_s - b.step_time_s):.3f} s: C adds {extra:.3f} s of exposed "
          f"communication, {loss:.3f} s of grouped-GEMM loss and {overhead:.3f} s of per-microbatch block cost, "
          f"and saves {saved:.3f} s of bubble.")


def main(argv: list[str]) -> None:
    """Run everything and print it."""
    start = time.time()
    runs = read_runs(Path(argv[0]) if argv else DEFAULT_RUNS)
    kept, dropped = prepare_runs(runs)
    print(f"Runs: {len(runs)} read, {len(kept)} modelled, {len(dropped)} excluded. Fitted per GPU type: "
          f"{', '.join(FIT_NAMES)}.\n")
    held = leave_one_model_out(kept)
    print_fidelity(kept, held)
    print_by_model(held)
    print_in_sample(kept)
    print_exclusions(dropped)
    print("\nAssumptions for the measured runs:")
    for note in ASSUMPTIONS:
        print(f"  - {note}")
    print_seed()
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
