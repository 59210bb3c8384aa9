"""Reports of a solve (and of a sweep) as one self-contained HTML file or a markdown file with its
figures beside it, rendered from the plain `solve --json`, `explain --json` and `sweep --json` dicts.

The content is built once as a list of blocks (headings, paragraphs, lists, tables, figures) and
written by two small renderers, so the HTML and the markdown report say the same thing. All text
is escaped; figures are PNGs from `solver/outputs/plots.py` (base64 data URIs in HTML, files in
`<stem>_files/` beside a markdown report).
"""

from __future__ import annotations

import base64
import html
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from parasol.errors import InputError
from parasol.files import check_output
from parasol.problems.derived import stage_of_virtual
from parasol.problems.megatron.layout_string import run_length
from parasol.solver.outputs import plots

if TYPE_CHECKING:
    from parasol.problems.loader import Problem

REPORT_SUFFIXES = (".html", ".htm", ".md")


@dataclass(frozen=True)
class Heading:
    """A section title; level 1 is the report's title."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A list of plain-text items."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A table of plain-text cells; `marked[i]` highlights row i (binding, over budget, failing)."""

    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    marked: tuple[bool, ...] = field(default=())


@dataclass(frozen=True)
class Figure:
    """A PNG figure; `name` is its file stem beside a markdown report."""

    name: str
    alt: str
    png: bytes


Block = Heading | Paragraph | Bullets | Table | Figure


def num(x: object, digits: int = 2) -> str:
    """A number for a table cell: thousands separators, `digits` decimals, '-' when missing."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    text = f"{x:,.{digits}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def pct(x: object, digits: int = 1) -> str:
    """A fraction as a percentage cell, '-' when missing."""
    return "-" if not isinstance(x, int | float) else f"{x:.{digits}%}"


MAPPING_COLUMNS = ("TP", "PP", "CP", "EP", "ETP", "VPP", "MBS", "recompute")


def recompute_cell(entry: dict) -> str:
    """The recompute choice, with the memory saving solve switched on for the mapping (e.g. 'none + fsdp')."""
    recompute = str(entry.get("mapping", {}).get("recompute", "-"))
    return f"{recompute} + {entry['memory_saving']}" if entry.get("memory_saving") else recompute


def mapping_cells(entry: dict) -> tuple[str, ...]:
    """Degrees, microbatches, bubble, layout, step time, throughput, MFU, peak memory and binding rules
    of one mapping dict: the cells of a front-table row after its label columns."""
    m, d, metrics = entry.get("mapping", {}), entry.get("derived", {}), entry.get("metrics", {})
    return (*(str(m.get(k.lower(), "-")) for k in MAPPING_COLUMNS[:-1]), recompute_cell(entry),
            str(m.get("rank_order", "-")),
            num(d.get("num_microbatches")), pct(d.get("bubble_fraction")), run_length(m.get("layout", [])),
            num(metrics.get("step_time_s"), 3), num(metrics.get("tokens_per_s_per_gpu"), 0),
            pct(metrics.get("mfu")), num(metrics.get("peak_memory_gb")), hbm_slack(metrics))


def hbm_slack(metrics: dict) -> str:
    """Usable HBM minus peak memory in GB (negative: over budget), '-' when either is missing."""
    if "usable_hbm_gb" not in metrics or "peak_memory_gb" not in metrics:
        return "-"
    return num(metrics["usable_hbm_gb"] - metrics["peak_memory_gb"])


FRONT_HEADER = ("#", "front", *MAPPING_COLUMNS, "rank order", "m", "bubble", "blocks per stage", "step s", "tok/s/GPU",
                "MFU", "peak GB", "HBM slack GB")


def front_table(mappings: list[dict], user: dict | None) -> Table:
    """One row per returned mapping (numbered as in the scatter plot), plus the user's own, marked."""
    rows = [(str(i + 1), str(m.get("pareto_rank", "-")), *mapping_cells(m)) for i, m in enumerate(mappings)]
    marked = [False] * len(rows)
    if user is not None:
        rows.append(("yours", "feasible" if user.get("feasible") else "infeasible", *mapping_cells(user)))
        marked.append(True)
    return Table("Returned mappings, fastest first within each front (the user's own mapping marked)",
                 FRONT_HEADER, tuple(rows), tuple(marked))


def stage_blocks(mapping: dict) -> dict[int, str]:
    """Block ranges each pipeline rank holds, from the layout in Megatron's virtual-stage order
    (virtual stage k runs on rank k mod PP): '0–3, 64–67' under VPP 2."""
    pp, layout = mapping.get("pp"), mapping.get("layout")
    if not pp or not layout:
        return {}
    ranges: dict[int, list[str]] = {}
    start = 0
    for k, n in enumerate(layout):
        ranges.setdefault(stage_of_virtual(k, pp), []).append(f"{start}–{start + n - 1}" if n > 1 else str(start))
        start += n
    return {stage: ", ".join(r) for stage, r in ranges.items()}


def stage_table(entry: dict) -> Table:
    """The heaviest rank of each stage: blocks, memory by ledger term, total, slack and time; stages
    over the usable HBM marked."""
    stages = entry.get("stages", [])
    terms = plots.memory_terms(stages)
    header = ("stage", "blocks", "layers", "in flight", *(f"{t} GB" for t in terms), "total GB", "slack GB",
              "time ms")
    rows, marked = [], []
    held = stage_blocks(entry.get("mapping", {}))
    for s in stages:
        rows.append((str(s.get("stage")), held.get(s.get("stage"), "–".join(str(b) for b in s.get("blocks", []))),
                     str(s.get("layers", "-")),
                     num(s.get("inflight_microbatches"), 0),
                     *(num(s.get("memory_terms_gb", {}).get(t)) for t in terms),
                     num(s.get("memory_gb")), num(s.get("slack_gb")), num(s.get("time_ms"), 1)))
        marked.append(float(s.get("slack_gb", 0.0)) < 0)
    return Table("Memory of the heaviest rank per stage (marked: over the usable HBM) and one microbatch's "
                 "forward + backward time", header, tuple(rows), tuple(marked))


def rule_status(entry: dict) -> dict[str, str]:
    """'violated' or 'warning' per rule named in the mapping's violations and warnings."""
    status = {w.get("rule", ""): "warning" for w in entry.get("warnings", [])}
    status.update({v.get("rule", ""): "violated" for v in entry.get("violations", [])})
    return status


STATUS_ORDER = ("violated", "warning", "binding", "holds", "exact", "not in force")
MARKED_STATUSES = ("violated", "warning", "binding")


def holding_status(constraint: dict) -> str:
    """How a holding rule holds: binding (an inequality at its limit), not in force (its condition does not
    concern the mapping), exact (a divisibility, equality or on/off condition met) or holds (with room)."""
    if constraint.get("binding"):
        return "binding"
    if not constraint.get("in_force", True):
        return "not in force"
    return "exact" if constraint.get("exact") else "holds"


def slack_table(entry: dict) -> Table:
    """Every rule's signed slack in its own unit: violated rules first, then warnings (flags Megatron
    rewrites), then binding rules (inequalities exactly at their limit), then inequalities with room, then
    exact rules that hold, then rules not in force, each group in the order judged; the first three marked."""
    named = rule_status(entry)
    rows = []
    for c in entry.get("constraints", []):
        status = named.get(c.get("rule", ""), holding_status(c))
        rows.append((STATUS_ORDER.index(status), (c.get("rule", "-"), num(c.get("slack"), 4), c.get("unit", ""), status)))
    rows.sort(key=lambda r: r[0])
    return Table("Slack of every rule (signed, in the rule's unit; marked: violated, warning or binding; exact: "
                 "holds by divisibility, equality or setting; not in force: its condition does not apply)",
                 ("rule", "slack", "unit", "status"), tuple(r for _, r in rows),
                 tuple(r[1][3] in MARKED_STATUSES for r in rows))


def violations_table(entry: dict) -> Table:
    """Each broken rule with Megatron's-style message, slack, source and enforcement stage."""
    rows = tuple((v.get("rule", "-"), v.get("message", ""), f"{num(v.get('slack'), 3)} {v.get('unit', '')}".strip(),
                  v.get("source", ""), v.get("stage", "")) for v in entry.get("violations", []))
    return Table("Violated rules", ("rule", "message", "slack", "source", "Megatron stage"), rows,
                 tuple(True for _ in rows))


def recorded_text(recorded: list[dict]) -> str:
    """A contract row's recorded quantities as 'name = value unit; …'."""
    parts = []
    for r in recorded:
        value = r.get("value")
        shown = f"{value:,.4g}" if isinstance(value, float) and abs(value) < 1e4 else num(value, 0)
        parts.append(f"{r.get('name', '')} = {shown} {r.get('unit', '')}".strip())
    return "; ".join(parts)


def contract_table(rows: list[dict]) -> Table:
    """The seed-003 §9 contract: one row per domain with what is recorded, the check, the verdict and
    why; failing rows marked."""
    cells = tuple((r.get("domain", ""), recorded_text(r.get("recorded", [])), r.get("check", ""),
                   r.get("verdict", ""), r.get("detail", ""), r.get("source", "")) for r in rows)
    return Table("Constraint contract (seed 003 §9): what is recorded, the verifiable criterion and its verdict",
                 ("domain", "recorded", "check", "verdict", "detail", "source"), cells,
                 tuple(r.get("verdict") == "fails" for r in rows))


def breakdown_table(entry: dict) -> Table:
    """Where the step time goes, in seconds and as a share of the step."""
    breakdown = (entry.get("step_time") or {}).get("breakdown_s", {})
    total = sum(breakdown.values()) or 1.0
    rows = tuple((plots.BREAKDOWN_LABELS.get(k, k.replace("_", " ")), num(v, 3), pct(v / total))
                 for k, v in breakdown.items())
    return Table("Step time by part (communication: the part not hidden behind compute)",
                 ("part", "seconds", "share"), rows)


def metric_items(entry: dict) -> tuple[str, ...]:
    """The headline numbers of one mapping as list items."""
    m, d, x = entry.get("mapping", {}), entry.get("derived", {}), entry.get("metrics", {})
    items = [
        f"mapping: {plots.degrees_label(m)}, GBS {num(m.get('gbs'))}, sequence {num(m.get('seq_len'))} tokens, "
        f"blocks per stage {run_length(m.get('layout', []))}",
        f"attention DP D_a = {num(d.get('dp_attn'))}, expert DP D_e = {num(d.get('dp_expert'))}, "
        f"microbatches m = {num(d.get('num_microbatches'))}, bubble {pct(d.get('bubble_fraction'))}",
    ]
    if "step_time_s" in x:
        items.append(f"step time {num(x['step_time_s'], 3)} s, {num(x.get('tokens_per_s_per_gpu'), 0)} tokens/s/GPU, "
                     f"{num(x.get('model_tflops_per_gpu'), 1)} model TFLOP/s/GPU, MFU {pct(x.get('mfu'))}, "
                     f"HFU {pct(x.get('hfu'))}")
    if "peak_memory_gb" in x:
        items.append(f"peak memory {num(x['peak_memory_gb'])} GB on stage {x.get('peak_memory_stage', '-')} "
                     f"of {num(x.get('usable_hbm_gb'))} GB usable HBM")
    return tuple(items)


def mapping_blocks(entry: dict, label: str, stem: str) -> list[Block]:
    """The full account of one mapping: headline numbers, memory per stage, stage times, step-time
    breakdown, slack of every rule, violations and the contract when present."""
    title = plots.degrees_label(entry.get("mapping", {}))
    blocks: list[Block] = [
        Bullets(metric_items(entry)),
        Figure(f"{stem}_memory", f"Memory per stage of {label}",
               plots.stage_memory_bars(entry, f"Memory of the heaviest rank per stage: {label}, {title}")),
        stage_table(entry),
    ]
    if entry.get("step_time"):
        blocks += [Figure(f"{stem}_times", f"Stage times of {label}",
                          plots.stage_times(entry, f"Stage times: {label}, {title}")),
                   breakdown_table(entry)]
    blocks.append(violations_table(entry) if entry.get("violations")
                  else Paragraph("Violated rules: none; every rule holds."))
    blocks.append(slack_table(entry))
    if entry.get("contract"):
        blocks += [Heading(f"Contract of {label}", 3), contract_table(entry["contract"])]
    return blocks


def user_blocks(user: dict) -> list[Block]:
    """The problem's own mapping: verdict, minimal conflict, nearest repairs and its full account."""
    blocks: list[Block] = [Heading("Your mapping (the problem's `mapping:` section)"),
                           Paragraph(f"Verdict: {plots.user_verdict(user)}.")]
    if user.get("minimal_conflict"):
        blocks.append(Paragraph("Minimal conflicting rule set: " + ", ".join(user["minimal_conflict"]) + "."))
    if user.get("repairs"):
        blocks.append(Bullets(tuple(f"nearest repair: {r.get('text', '')} → {plots.degrees_label(r.get('mapping', {}))}"
                                    for r in user["repairs"])))
    return blocks + mapping_blocks(user, "your mapping", "yours")


def notes_blocks(entry: dict) -> list[Block]:
    """Warnings (flags Megatron would rewrite), rules not evaluated, and the ledger's assumptions."""
    items = [f"warning ({w.get('rule')}): {w.get('message')} [{w.get('source')}]" for w in entry.get("warnings", [])]
    items += [f"not evaluated ({n.get('rule')}): {n.get('reason')}" for n in entry.get("not_evaluated", [])]
    items += [f"assumption: {a}" for a in entry.get("assumptions", [])]
    return [Heading("Warnings and assumptions", 3), Bullets(tuple(items))] if items else []


def search_text(solve: dict) -> str:
    """One sentence on the search: status, answer size and rows (not its wall time, so that the same
    answer gives the same report)."""
    s = solve.get("search", {})
    return (f"Search status: {solve.get('status', '-')}; {len(solve.get('mappings', []))} mapping(s) returned; "
            f"{num(s.get('rows_with_a_fitting_cut'))} of {num(s.get('rows'))} degree rows found to fit in memory, "
            f"{num(s.get('rows_screened'))} screened within the time limit; {num(s.get('master_solves'))} master solves.")


def solve_blocks(solve: dict, user: dict | None, pick: int, title: str) -> list[Block]:
    """The front (plot and table), the picked mapping's account and the user's mapping."""
    mappings = solve.get("mappings", [])
    blocks: list[Block] = [Heading("Pareto front: step time × peak memory"), Paragraph(search_text(solve))]
    if mappings or user is not None:
        blocks += [Figure("front", "Pareto fronts of step time against peak memory",
                          plots.front_scatter(mappings, user, f"Pareto fronts, step time × peak memory: {title}")),
                   front_table(mappings, user)]
    if mappings:
        chosen = mappings[min(pick, len(mappings)) - 1]
        blocks += [Heading(f"Chosen mapping #{min(pick, len(mappings))}: {plots.degrees_label(chosen['mapping'])}"),
                   *mapping_blocks(chosen, f"mapping #{min(pick, len(mappings))}", "chosen"),
                   *notes_blocks(chosen)]
    else:
        blocks.append(Paragraph("No mapping of the search space runs: see your mapping's account below "
                                "and `parasol explain` for why."))
    if user is not None:
        blocks += user_blocks(user)
    return blocks


def report_blocks(*, solve: dict | None = None, user: dict | None = None, sweep: dict | None = None,
                  title: str = "parasol report", context: Sequence[str] = (), pick: int = 1) -> list[Block]:
    """Everything a report shows, in order: title and context, the solve's front and accounts, the
    user's mapping, and the sweep's scaling."""
    blocks: list[Block] = [Heading(title, 1)]
    if context:
        blocks.append(Bullets(tuple(context)))
    if solve is not None:
        blocks += solve_blocks(solve, user, pick, title)
    elif user is not None:
        blocks += user_blocks(user)
    if sweep is not None:
        blocks += sweep_blocks(sweep)
    return blocks


def sweep_table(sweep: dict) -> Table:
    """The `sweep --json` scaling table, one row per cluster size: status, the fastest mapping, its step time, throughput, MFU, scaling
    efficiency (against the smallest size with a mapping, and marginal), m, bubble and peak memory."""
    rows = tuple((num(r.get("gpus")), str(r.get("status", "-")), str(r.get("mapping", "-")),
                  num(r.get("step_time_s"), 3), num(r.get("tokens_per_s_per_gpu"), 0), pct(r.get("mfu")),
                  pct(r.get("scaling_efficiency")), pct(r.get("marginal_efficiency")),
                  num(r.get("num_microbatches")), pct(r.get("bubble_fraction")), num(r.get("peak_memory_gb")))
                 for r in sweep.get("table", []))
    return Table("Fastest mapping at each cluster size",
                 ("GPUs", "status", "fastest mapping", "step s", "tok/s/GPU", "MFU", "scaling eff", "marginal",
                  "m", "bubble", "peak GB"), rows)


def scaling_png(sweep: dict) -> bytes:
    """The sweep's scaling curve (`plots.scaling_plot`, which writes a file) as PNG bytes."""
    with tempfile.TemporaryDirectory() as folder:
        return plots.scaling_plot(sweep, Path(folder) / "scaling.png").read_bytes()


def sweep_blocks(sweep: dict) -> list[Block]:
    """The scaling curve of a sweep, its table and its notes."""
    blocks: list[Block] = [Heading("Scaling across cluster sizes"),
                           Figure("scaling", "Scaling across cluster sizes", scaling_png(sweep)),
                           sweep_table(sweep)]
    if sweep.get("notes"):
        blocks.append(Bullets(tuple(sweep["notes"])))
    return blocks


CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.3em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.1em}img{max-width:100%;height:auto;display:block;margin:.6em 0}
.scroll{overflow-x:auto}table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}
caption{text-align:left;font-weight:600;padding:.3em 0}th,td{border:1px solid #ddd;padding:.25em .5em;
vertical-align:top}th{background:#f4f4f4;text-align:left}td.n{text-align:right;white-space:nowrap}
tr.mark td{background:#fff3cd}"""
NUMERIC = re.compile(r"^[-+]?[\d,]*\.?\d+%?$")


def _html_table(t: Table) -> str:
    """A table with escaped cells, numeric cells right-aligned, marked rows highlighted."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    body = []
    for i, row in enumerate(t.rows):
        cls = ' class="mark"' if i < len(t.marked) and t.marked[i] else ""
        cells = "".join(f'<td class="n">{html.escape(c)}</td>' if NUMERIC.match(c) else f"<td>{html.escape(c)}</td>"
                        for c in row)
        body.append(f"<tr{cls}>{cells}</tr>")
    return (f'<div class="scroll"><table><caption>{html.escape(t.caption)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def _html_block(b: Block) -> str:
    """One block as HTML."""
    if isinstance(b, Heading):
        return f"<h{b.level}>{html.escape(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        return f"<p>{html.escape(b.text)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        return _html_table(b)
    data = base64.b64encode(b.png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(b.alt)}">'


def render_html(blocks: Sequence[Block]) -> str:
    """The report as one self-contained HTML document (figures as data URIs, no external files)."""
    title = next((b.text for b in blocks if isinstance(b, Heading) and b.level == 1), "parasol report")
    body = "\n".join(_html_block(b) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
            f"<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def md_escape(text: str) -> str:
    """Plain text safe inside markdown (and a table cell): specials backslash-escaped, newlines as spaces."""
    return MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def _md_table(t: Table) -> str:
    """A GitHub-flavoured markdown table; marked rows have their first cell in bold with a ◀."""
    lines = [f"*{md_escape(t.caption)}*", "", "| " + " | ".join(md_escape(h) for h in t.header) + " |",
             "|" + "|".join("---:" if all(NUMERIC.match(r[k]) for r in t.rows) and t.rows else "---"
                            for k in range(len(t.header))) + "|"]
    for i, row in enumerate(t.rows):
        cells = [md_escape(c) for c in row]
        if i < len(t.marked) and t.marked[i]:
            cells[0] = f"**{cells[0]}** ◀"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(blocks: Sequence[Block], files_dir: str) -> tuple[str, dict[str, bytes]]:
    """The report as markdown linking its figures in `files_dir/`, and those figures by file name."""
    parts, files = [], {}
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"{'#' * b.level} {md_escape(b.text)}")
        elif isinstance(b, Paragraph):
            parts.append(md_escape(b.text))
        elif isinstance(b, Bullets):
            parts.append("\n".join(f"- {md_escape(i)}" for i in b.items))
        elif isinstance(b, Table):
            parts.append(_md_table(b))
        else:
            files[f"{b.name}.png"] = b.png
            parts.append(f"![{md_escape(b.alt)}]({files_dir}/{b.name}.png)")
    return "\n\n".join(parts) + "\n", files


def report_format(path: Path) -> str:
    """'html' or 'md' from the file's suffix; anything else is an input error."""
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise InputError(f"Cannot tell the report format of {str(path)!r} from its suffix.", field="--report",
                         value=str(path), expected="a file name ending in .html (one self-contained file) or "
                         ".md (markdown with its figures in <stem>_files/)", fix="name the report e.g. report.html.")
    return "md" if suffix == ".md" else "html"


def write_report(path: str | Path, *, solve: dict | None = None, user: dict | None = None,
                 sweep: dict | None = None, title: str = "parasol report", context: Sequence[str] = (),
                 pick: int = 1) -> list[Path]:
    """Write the report of a solve dict (with the user's own mapping's explain dict) and/or a sweep
    dict to `path` (.html: one file; .md: the markdown and its PNGs in `<stem>_files/`); returns
    every file written."""
    path = Path(path)
    kind = report_format(path)
    if path.is_dir():
        raise InputError(f"The report path {str(path)!r} is a directory.", field="--report", value=str(path),
                         expected="a file name", fix="add a file name, e.g. DIR/report.html.")
    blocks = report_blocks(solve=solve, user=user, sweep=sweep, title=title, context=context, pick=pick)
    check_output(path, "--report")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "html":
            path.write_text(render_html(blocks), encoding="utf-8")
            return [path]
        files_dir = path.with_name(f"{path.stem}_files")
        text, files = render_markdown(blocks, files_dir.name)
        files_dir.mkdir(exist_ok=True)
        written = []
        for name, png in files.items():
            (files_dir / name).write_bytes(png)
            written.append(files_dir / name)
        path.write_text(text, encoding="utf-8")
        return [path, *written]
    except OSError as exc:
        raise InputError(f"Cannot write the report {str(path)!r}: {exc.strerror}.", field="--report",
                         value=str(path), fix="choose a writable location.") from None


def problem_title(problem: Problem) -> str:
    """'<model> on <N> × <GPU>': the report's title."""
    return f"{problem.model.name} on {problem.gpus:,} × {problem.hardware.gpu.name}"


def problem_context(problem: Problem) -> tuple[str, ...]:
    """The problem's file, model, cluster and training run as report context lines."""
    t = problem.training
    hw = problem.spec.hardware
    return (f"problem: {problem.source}" + (f" ({problem.spec.name})" if problem.spec.name else ""),
            f"model: {problem.model.name}, {problem.model.num_layers} blocks",
            f"cluster: {problem.gpus:,} × {problem.hardware.gpu.name}" + (f" (preset {hw.preset})" if hw.preset else "")
            + f", usable HBM {problem.hardware.gpu.usable_hbm_gb:.1f} GB per GPU",
            f"training: {t.global_batch:,} sequences of {t.seq_len:,} tokens per step, {t.precision.value}")


def user_explanation(problem: Problem) -> tuple[dict | None, str | None]:
    """The explain dict of the problem's own `mapping:` section (None without one), or why it could
    not be judged (a mapping no rule can judge, e.g. a degree above the GPU count)."""
    from parasol.problems.mapping_input import build_mapping
    from parasol.solver.diagnose.explain import explain

    if problem.spec.mapping is None:
        return None, None
    try:
        return explain(problem, build_mapping(problem, {})).as_dict(), None
    except InputError as exc:
        return None, f"your mapping (the problem's `mapping:` section) could not be judged: {exc.detail}"


def write_solve_report(problem: Problem, solve: dict, path: str | Path, pick: int = 1) -> list[Path]:
    """The report of `parasol solve --report`: the solve dict, the problem's own mapping marked."""
    user, why_not = user_explanation(problem)
    context = problem_context(problem) + ((why_not,) if why_not else ())
    return write_report(path, solve=solve, user=user, title=problem_title(problem), context=context, pick=pick)


def write_sweep_report(sweep: dict, path: str | Path) -> list[Path]:
    """The report of `parasol sweep --report`: the scaling curve, table and notes of a `sweep --json` dict."""
    context = (f"problem: {sweep.get('problem', '-')}",
               f"sizes: {', '.join(num(s.get('gpus')) for s in sweep.get('sizes', []))} GPUs "
               f"({sweep.get('scaling', '-')} scaling)")
    return write_report(path, sweep=sweep, context=context,
                        title=f"{sweep.get('model', '-')} on {sweep.get('gpu', '-')}: {sweep.get('scaling', '')} scaling")
