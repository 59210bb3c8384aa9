"""`parasol explain` on one screen: the verdict, the broken rules, the minimal conflict, the best repairs
and one line each for step time, throughput, MFU and memory (`--full` prints every table)."""

from __future__ import annotations

import textwrap

from rich.markup import escape

from parasol.problems.megatron.layout_string import run_length
from parasol.problems.model.architecture import ModelArchitecture
from parasol.solver.diagnose.explain import Explanation
from parasol.solver.diagnose.repairs import SEARCHED

MAX_RULES = 6
"""Broken rules listed before '… and N more'."""
MESSAGE_LINES = 3
"""Wrapped lines of one rule's message before it is shortened (`--full` prints it whole)."""


def signed(x: float, digits: int = 3) -> str:
    """A slack with its sign, never '-0' (a value that rounds to zero prints as 0)."""
    if abs(x) < 1e-6:
        return "0"
    text = f"{x:,.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return "0" if text.lstrip("-").strip("0.,") == "" else text


def degrees_text(model: ModelArchitecture, m: dict, derived: dict) -> str:
    """The mapping in Megatron's words; MoE fields (EP, ETP, expert DP) only for MoE models."""
    parts = [f"TP{m['tp']}", f"PP{m['pp']}", f"CP{m['cp']}", f"DP{_num(derived['dp_attn'])}"]
    if model.moe is not None:
        parts += [f"EP{m['ep']}", f"ETP{m['etp']}", f"expert-DP{_num(derived['dp_expert'])}"]
    parts += [f"VPP{m['vpp']}", f"MBS{m['mbs']}", f"GBS{m['gbs']:,}", f"seq {m['seq_len']:,}",
              f"recompute {m['recompute']}"]
    return " ".join(parts)


def _num(x: float | int | None) -> str:
    if x is None:
        return "-"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.3g}"


def _wrapped(text: str, width: int, indent: str, lines: int = MESSAGE_LINES) -> list[str]:
    """`text` wrapped at `width` under `indent`, at most `lines` lines (the last ends with '…')."""
    out = textwrap.wrap(text, width=max(width - len(indent), 20), break_long_words=False, break_on_hyphens=False)
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1] + " …"
    return [indent + escape(line) for line in out]


def head_lines(ex: Explanation, data: dict) -> list[str]:
    """Model, cluster, mapping, layout and the verdict."""
    m = data["mapping"]
    broken = len(data["violations"])
    verdict = ("[bold green]FEASIBLE[/]" if ex.feasible
               else f"[bold red]INFEASIBLE[/]: {broken} rule{'s' if broken != 1 else ''} broken")
    nodes = data["metrics"]
    partial = (f" ({nodes['ranks_per_node']} ranks on each of {nodes['nodes']} nodes, {nodes['idle_gpus']} GPUs idle)"
               if nodes["idle_gpus"] else "")
    return [
        f"[bold]{escape(ex.problem.model.name)}[/] on {m['gpus']:,} × {escape(ex.problem.hardware.gpu.name)}{partial}",
        f"mapping  {degrees_text(ex.problem.model, m, data['derived'])}",
        f"layout   {run_length(m['layout'])} blocks per stage; {_num(data['derived']['num_microbatches'])} "
        f"microbatches, bubble {data['derived']['bubble_fraction']:.1%}",
        f"verdict  {verdict}",
    ]


def rule_lines(data: dict, width: int) -> list[str]:
    """Each broken rule with its slack and unit, its message, its source and the Megatron stage."""
    violations = data["violations"]
    if not violations:
        return []
    out = ["", "[bold]Broken rules[/] (negative slack: by how much; where: the Megatron stage that fails)"]
    for v in violations[:MAX_RULES]:
        out.append(f"  [red]{escape(v['rule'])}[/]  slack {signed(v['slack'])} {escape(v['unit'])}")
        out += _wrapped(v["message"], width, "    ")
        stage = v["stage"].split(": ", 1)[-1]
        out += [f"[dim]{line}[/]" for line in _wrapped(f"source: {v['source']}; where: {stage}", width, "    ", lines=2)]
    if len(violations) > MAX_RULES:
        out.append(f"  … and {len(violations) - MAX_RULES} more (--full lists every rule)")
    return out


def conflict_lines(data: dict, width: int) -> list[str]:
    """The minimal conflicting set and what it means for this mapping."""
    if not data["minimal_conflict"]:
        return []
    text = f"Minimal conflict: {', '.join(data['minimal_conflict'])} ({data['minimal_conflict_note']})"
    return _wrapped(text, width, "", lines=4)


def repair_lines(data: dict, model: ModelArchitecture, usable_gb: float, width: int) -> list[str]:
    """The best repairs: what to change, the repaired mapping, modelled step time and peak memory, against the
    GPU's usable HBM (the hardware's: a mapping whose grid does not divide has no ledger of its own)."""
    if data["feasible"]:
        return []
    repairs = data["repairs"]
    if not repairs:
        return [f"No repair found {SEARCHED} (try `parasol solve` for the whole space)."]
    out = ["", f"[bold]Best repairs[/] (fewest changes first, then the fastest modelled step; usable "
               f"{usable_gb:.1f} GB)"]
    for i, r in enumerate(repairs, start=1):
        step = "-" if r.get("step_time_s") is None else f"{r['step_time_s']:,.3f} s"
        peak = "-" if r.get("peak_memory_gb") is None else f"{r['peak_memory_gb']:,.1f} GB"
        out += _wrapped(f"{i}. {r['text']}", width, "  ", lines=2)
        m = r["mapping"]
        derived = {"dp_attn": _dp(m), "dp_expert": _dp(m, expert=True)}
        out += _wrapped(f"→ {degrees_text(model, m, derived)}, layout {run_length(m['layout'])}; "
                        f"step {step}, peak {peak}", width, "     ", lines=2)
    return out


def _dp(m: dict, expert: bool = False) -> int | float:
    """Data-parallel size of a repaired mapping (attention, or expert with `expert`)."""
    grid = m["pp"] * (m["etp"] * m["ep"] if expert else m["tp"] * m["cp"])
    return m["gpus"] // grid if m["gpus"] % grid == 0 else m["gpus"] / grid


def metric_lines(data: dict, width: int) -> list[str]:
    """One line each: step time, tokens/s/GPU, MFU, peak memory per stage."""
    step = data.get("step_time")
    out = [""]
    if step:
        b = step["breakdown_s"]
        exposed = sum(v for k, v in b.items() if k not in ("compute", "bubble"))
        out.append(f"step time    {step['step_time_s']:,.3f} s (compute {b.get('compute', 0):,.3f}, bubble "
                   f"{b.get('bubble', 0):,.3f}, exposed communication and optimizer {exposed:,.3f})")
        out.append(f"throughput   {step['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU "
                   f"({step['tokens_per_s']:,.0f} tokens/s), {step['model_tflops_per_gpu']:,.0f} model TFLOP/s/GPU")
        out.append(f"MFU          {step['mfu']:.1%} of the {step['precision'].upper()} dense peak "
                   f"({step['peak_tflops']:,.0f} TFLOP/s); HFU {step['hfu']:.1%}")
    else:
        out.append("step time    not modelled for this mapping (its grids or layout do not divide)")
    if data["stages"]:
        usable = data["metrics"]["usable_hbm_gb"]
        cells = [f"{s['memory_gb']:,.1f}" + ("!" if s["slack_gb"] < 0 else "") for s in data["stages"]]
        text = f"peak memory  per stage, GB of {usable:,.1f} usable ('!' over): {' '.join(cells)}"
        out += _wrapped(text, width, "", lines=4)
    return out


def summary_lines(ex: Explanation, data: dict, width: int) -> list[str]:
    """The one-screen account (rich markup; the console drops styles when not a terminal)."""
    lines = head_lines(ex, data) + rule_lines(data, width) + conflict_lines(data, width)
    lines += repair_lines(data, ex.problem.model, ex.problem.hardware.gpu.usable_hbm_gb, width)
    lines += metric_lines(data, width)
    warnings = data["warnings"]
    if warnings:
        lines += ["", f"[yellow]{len(warnings)} warning(s)[/]: " + escape(", ".join(w.get("rule") or w.get("flag", "") for w in warnings))
                  + " (--full says what each means)"]
    lines.append("[dim]--full: every rule, the groups, the memory ledger and the step-time breakdown; "
                 "--json: every field[/]")
    return lines
