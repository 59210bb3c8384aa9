"""Why `solve` found nothing: the rules and memory-ledger terms that rule out every row of the search
space, each with the smallest change that would admit one."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.constraints.evaluate import evaluate
from parasol.constraints.physics.memory import StageLedger
from parasol.problems.loader import Problem
from parasol.problems.mapping import Mapping
from parasol.solver.diagnose.repairs import best_cut
from parasol.solver.search.space import Row, enumerate_rows

SAMPLE = 48
"""Rows judged (spread evenly over the space, which is ordered by degrees) when the space is larger."""
MEMORY = "memory-fits-hbm"


@dataclass(frozen=True)
class Blocker:
    """One rule broken by every row judged, with the row closest to meeting it and the change needed."""

    rule: str
    rows: int
    closest: str
    message: str
    change: str
    mapping: Mapping | None = None
    """The closest row's mapping (for its contract table)."""

    def as_dict(self) -> dict:
        return {"rule": self.rule, "rows": self.rows, "closest_row": self.closest, "message": self.message,
                "smallest_change": self.change}


def _label(m: Mapping) -> str:
    return (f"TP{m.tp} PP{m.pp} CP{m.cp} EP{m.ep} ETP{m.expert_tp} VPP{m.vpp} MBS{m.mbs} "
            f"recompute {m.recompute.value}")


def _judged_mapping(problem: Problem, row: Row) -> Mapping:
    """The row with the fastest cut that fits memory (the solver's DP), else with its default cut as an explicit
    layout (Row.default_cut, as the solver judges rows): an interleaved row with more virtual stages than blocks
    has no implicit split, and without a layout its memory would not be judged at all (DeepSeek-V2 on 8 devices
    at PP 4, VPP 16 hid the memory rule every other row broke)."""
    even = row.mapping(problem)
    layout = best_cut(problem, even, problem.spec.framework.options).layout
    return row.mapping(problem, layout if layout is not None else row.default_cut(problem))


def _terms(stage: StageLedger) -> str:
    """The largest ledger terms of a stage, GB."""
    terms = sorted(stage.terms, key=lambda t: -t.bytes)[:4]
    return ", ".join(f"{t.name} {t.bytes / 1e9:,.1f}" for t in terms)


def _change(problem: Problem, rule: str, unit: str, slack: float, mapping: Mapping, ledger: object) -> str:
    """The smallest change the closest row needs for `rule`."""
    if unit == "devices":
        return f"needs GPUs ≥ {mapping.gpus - round(slack):,} (now {mapping.gpus:,})"
    if rule == MEMORY and ledger is not None:
        peak = ledger.peak
        return (f"needs {-slack:,.1f} GB less per GPU on stage {peak.stage} of the least-memory row ({peak.total_gb:,.1f} "
                f"of {peak.usable_bytes / 1e9:,.1f} GB usable; largest terms {_terms(peak)} GB): more PP, EP or CP, "
                "recompute, or more GPUs")
    return f"{-slack:,.4g} {unit} more slack on the closest row"


def blocking_rules(problem: Problem) -> tuple[Blocker, ...]:
    """Rules that every judged row of the space breaks (all rows, or SAMPLE spread over them); for each,
    the row closest to meeting it and the smallest change there."""
    rows = enumerate_rows(problem)
    if not rows:
        return ()
    step = max(1, len(rows) // SAMPLE)
    judged = rows[::step][:SAMPLE]
    broken_in: dict[str, int] = {}
    closest: dict[str, tuple] = {}
    for row in judged:
        mapping = _judged_mapping(problem, row)
        ev = evaluate(problem, mapping)
        for v in ev.violations:
            broken_in[v.rule] = broken_in.get(v.rule, 0) + 1
            if v.rule not in closest or v.slack > closest[v.rule][0].slack:
                closest[v.rule] = (v, mapping, ev.facts.ledger)
    out: list[Blocker] = []
    for rule, count in broken_in.items():
        if count < len(judged):
            continue
        v, mapping, ledger = closest[rule]
        out.append(Blocker(rule, count, _label(mapping), v.message,
                           _change(problem, rule, v.unit, v.slack, mapping, ledger), mapping))
    return tuple(sorted(out, key=lambda b: ("GPUs ≥" not in b.change, b.rule == MEMORY)))


def blocking_lines(blockers: tuple[Blocker, ...], rows: int) -> list[str]:
    """The blockers for a terminal: rule, smallest change, the closest row's message (shortened)."""
    if not blockers:
        return []
    judged = blockers[0].rows
    out = [f"Every row judged ({judged:,} of {rows:,}, spread over the space) breaks:"]
    for b in blockers:
        message = b.message if len(b.message) <= 160 else b.message[:157].rsplit(" ", 1)[0] + " …"
        out += [f"  {b.rule}: {b.change}", f"    closest row {b.closest}: {message}"]
    return out
