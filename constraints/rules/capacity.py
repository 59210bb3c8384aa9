"""Capacity rule: the heaviest rank of every pipeline stage fits in the GPU's usable HBM.

Source: seed 000 §显存先按最重的 rank 算 (M_peak of the heaviest rank); seed 003 §2 (usable HBM is
HBM less the runtime reserve). The ledger itself is constraints/physics/memory.py.
"""

from __future__ import annotations

from parasol.constraints.core.base import Citation, Constraint, Facts, Family
from parasol.problems.mapping import DEGREES


class MemoryFitsHBM(Constraint):
    """Peak memory of each stage's heaviest rank <= usable HBM; slack is the tightest stage's margin."""

    id = "memory-fits-hbm"
    family = Family.memory
    citation = Citation("seed 000 §显存先按最重的 rank 算; seed 003 §2 (usable HBM after reserve)")
    pack = None
    unit = "GB"
    summary = "per-stage peak memory of the heaviest rank <= usable HBM"

    def needs_ledger(self) -> bool:
        return True

    def slack(self, f: Facts) -> float:
        return min(s.slack_gb for s in f.ledger.stages)

    def message(self, f: Facts) -> str:
        over = [s for s in f.ledger.stages if s.slack_gb < 0]
        usable = f.ledger.stages[0].usable_bytes / 1e9
        if not over:
            peak = f.ledger.peak
            return f"every stage fits; peak {peak.total_gb:.2f} GB on stage {peak.stage} of {usable:.2f} GB usable"
        parts = [f"stage {s.stage} needs {s.total_gb:.2f} GB (exceeds by {-s.slack_gb:.2f} GB)" for s in over]
        return f"usable HBM is {usable:.2f} GB per GPU: " + "; ".join(parts)

    def post(self, model, v, enforce) -> None:
        """Allow exactly the degree tuples whose ledger fits, per recompute choice (the same Python
        ledger, row by row; v.memory_fits builds it)."""
        names = DEGREES
        for option, flag in v.recompute.items():
            allowed = [values for values in v.table_tuples(option)
                       if v.memory_fits(dict(zip(names, values, strict=True)), option)]
            if allowed:
                model.AddAllowedAssignments([v.degree[n] for n in names], allowed).OnlyEnforceIf([enforce, flag])
            else:
                model.AddBoolOr([enforce.Not(), flag.Not()])
