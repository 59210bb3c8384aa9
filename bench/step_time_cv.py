"""How well the step-time model predicts runs it was not fitted on, and seed 000's A/B/C with breakdowns.

    python bench/step_time_cv.py [RUNS.yaml]

Leave-one-model-out cross-validation over the measured runs (default
reference/measured-configs.yaml): for every GPU type and every model measured on it, the
coefficients are fitted on that GPU type's other models and the held-out model's runs are predicted.
Prints the median absolute percentage error of tokens/s/GPU (overall and per GPU type), the Spearman
rank correlation of predicted and measured tokens/s/GPU inside every (model, GPU type) group with at
least three runs, the in-sample error of the bundled fit, the runs left out and why, and seed 000's
configurations A, B and C on DeepSeek-V4-Pro with their predicted step time and breakdown.
Then the same split by model family: hybrid models (Mamba-2 / gated DeltaNet layers) and the others.
Targets (issue 4): median error <= 15%, rank correlation >= 0.8.
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
    fit_all,
    leave_one_model_out,
    prepare_runs,
    uses_scan,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ROOT / "reference" / "measured-configs.yaml"


def median(values: list[float] | np.ndarray) -> float:
    """Median of a non-empty sequence, NaN when empty."""
    return float(np.median(values)) if len(values) else float("nan")


def print_cross_validation(held: list[HeldOut]) -> None:
    """MAPE overall and per GPU type, then rank correlation per (model, GPU type) group."""
    ape = np.concatenate([h.ape for h in held])
    print(f"Leave-one-model-out: {len(ape)} runs, {len(held)} (model, GPU type) groups")
    print(f"  median APE of tokens/s/GPU, all runs: {median(ape):.1f}%  (mean {ape.mean():.1f}%, "
          f"share within 15%: {np.mean(ape <= 15):.0%}, within 25%: {np.mean(ape <= 25):.0%})")
    print(f"  {'GPU type':8s} {'runs':>5s} {'models':>6s} {'median APE %':>13s} {'mean APE %':>11s}")
    for gpu in sorted({h.gpu_file for h in held}):
        group = [h for h in held if h.gpu_file == gpu]
        a = np.concatenate([h.ape for h in group])
        print(f"  {gpu:8s} {len(a):5d} {len(group):6d} {median(a):13.1f} {a.mean():11.1f}")
    print("\nSpearman rho inside (model, GPU type) groups with >= 3 runs (held-out predictions):")
    print(f"  {'model':18s} {'GPU':6s} {'runs':>4s} {'configs':>7s} {'rho':>6s} {'median APE %':>13s}")
    rhos = []
    for h in sorted(held, key=lambda h: (h.model_id, h.gpu_file)):
        if len(h.measured) < 3:
            continue
        rho = h.spearman
        configs = len(set(h.predicted))
        shown = f"{rho:6.2f}" if rho is not None else "   n/a"
        if rho is not None:
            rhos.append(rho)
        print(f"  {h.model_id:18s} {h.gpu_file:6s} {len(h.measured):4d} {configs:7d} {shown} {median(h.ape):13.1f}")
    print(f"  median rho over {len(rhos)} groups: {median(rhos):.2f}  (n/a: every run of the group has the "
          "same configuration, so only software versions differ)")


def print_by_family(held: list[HeldOut], hybrid_models: set[str]) -> None:
    """Leave-one-model-out median error and in-group Spearman for models with Mamba-2 / gated DeltaNet
    layers and for the others."""
    print("\nBy model family (held-out predictions):")
    for label, chosen in (("hybrid (Mamba-2 / GDN layers)", [h for h in held if h.model_id in hybrid_models]),
                          ("transformer", [h for h in held if h.model_id not in hybrid_models])):
        if not chosen:
            continue
        ape = np.concatenate([h.ape for h in chosen])
        rhos = [h.spearman for h in chosen if h.spearman is not None]
        print(f"  {label:30s} {len(ape):4d} runs  median APE {median(ape):5.1f}%  within 15%: "
              f"{np.mean(ape <= 15):4.0%}  median rho {median(rhos):5.2f} over {len(rhos)} groups")


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
    print_cross_validation(held)
    print_by_family(held, {r.model_id for r in kept if uses_scan(r)})
    print_in_sample(kept)
    print_exclusions(dropped)
    print("\nAssumptions for the measured runs:")
    for note in ASSUMPTIONS:
        print(f"  - {note}")
    print_seed()
    print(f"\n({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
