"""Reports of `parasol solve --report`: the HTML and markdown writers, their tables and figures.

Fast tests render hand-made `solve --json` / `explain --json` dicts with the figures replaced by a
tiny PNG (the structure is what they check); the tests marked slow draw the real matplotlib figures
and run the CLI on the bundled DeepSeek-V4-Pro problem.
"""

from __future__ import annotations

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from parasol.errors import InputError
from parasol.problems.loader import load_problem
from parasol.solver.cli import main
from parasol.solver.outputs import plots, report

USABLE = 74.0
TERMS = ("weights (dense)", "gradients", "optimizer state", "activations")
CONTRACT = [
    {"domain": "model structure", "recorded": [{"name": "total parameters", "value": 5.0e12, "unit": "params"}],
     "check": "recomputed total within 1% of the stated 5T", "verdict": "holds",
     "detail": "5.00T recomputed against 5T stated (0.0% off).", "source": "seed 003 §1"},
    {"domain": "training state", "recorded": [{"name": "state per device", "value": 1250.0, "unit": "GB"}],
     "check": "state per device <= usable HBM (74 GB)", "verdict": "fails",
     "detail": "1,250 GB per device on 64 devices exceeds 74 GB by 1,176 GB.", "source": "seed 003 §2"},
    {"domain": "precision", "recorded": [], "check": "rollout logprob gap <= 0.01 nats",
     "verdict": "not checked", "detail": "needs measured logprobs, which parasol cannot make.",
     "source": "seed 003 §6"},
]


def entry(tp: int, pp: int, ep: int, step_s: float, peak_gb: float, rank: int = 1,
          stage_gb: tuple[float, ...] | None = None, feasible: bool = True) -> dict:
    """A hand-made mapping dict in the explain contract: stages share `peak_gb` out over TERMS."""
    per_stage = stage_gb or tuple(peak_gb - 2.0 * s for s in range(pp))
    stages = [{"stage": s, "layers": 4, "blocks": [4 * s, 4 * s + 3], "moe_layers": 4, "memory_gb": gb,
               "slack_gb": round(USABLE - gb, 4), "inflight_microbatches": float(pp - s),
               "memory_terms_gb": {t: gb / len(TERMS) for t in TERMS}, "time_ms": 200.0 + 10 * (s % 2)}
              for s, gb in enumerate(per_stage)]
    violations = [] if feasible else [{
        "rule": "memory-fits-hbm", "message": f"usable HBM is {USABLE:.2f} GB per GPU: stage 0 needs "
        f"{per_stage[0]:.2f} GB <script>", "slack": round(USABLE - max(per_stage), 4), "unit": "GB",
        "source": "seed 000 §显存先按最重的 rank 算", "stage": "-: not a Megatron check", "family": "memory"}]
    return {
        "feasible": feasible,
        "mapping": {"gpus": 64, "tp": tp, "pp": pp, "cp": 1, "ep": ep, "etp": 1, "vpp": 1, "mbs": 1, "gbs": 256,
                    "seq_len": 4096, "recompute": "full", "layout": [4] * pp},
        "derived": {"dp_attn": 64 // (tp * pp), "dp_expert": 64 // (pp * ep), "num_microbatches": 8,
                    "bubble_fraction": (pp - 1) / (8 + pp - 1)},
        "violations": violations,
        "constraints": [{"rule": "experts-divisible-by-ep", "slack": 0.0, "unit": "experts", "binding": True},
                        {"rule": "memory-fits-hbm", "slack": round(USABLE - max(per_stage), 4), "unit": "GB",
                         "binding": False},
                        {"rule": "non-interleaved-disables-p2p-overlap", "slack": -1.0, "unit": "settings",
                         "binding": False}],
        "warnings": [{"rule": "non-interleaved-disables-p2p-overlap", "message": "overlap_p2p_comm set to False",
                      "source": "Megatron-LM megatron/training/arguments.py:1010-1018", "stage": "A"}],
        "not_evaluated": [],
        "metrics": {"peak_memory_gb": max(per_stage), "peak_memory_stage": 0, "usable_hbm_gb": USABLE,
                    "step_time_s": step_s, "tokens_per_s_per_gpu": 1000.0, "model_tflops_per_gpu": 300.0,
                    "mfu": 0.3, "hfu": 0.35},
        "stages": stages,
        "assumptions": ["Weights BF16."],
        "minimal_conflict": [] if feasible else ["memory-fits-hbm"],
        "repairs": [] if feasible else [{"mapping": {"tp": 1, "pp": 4, "ep": 8}, "changes": {"pp": [2, 4]},
                                         "text": "set PP=4"}],
        "step_time": {"step_time_s": step_s, "breakdown_s": {"compute": step_s * 0.8, "ep": step_s * 0.1,
                                                             "bubble": step_s * 0.1}},
        "pareto_rank": rank,
    }


def solve_dict() -> dict:
    """A two-front answer of four mappings, the first carrying a contract."""
    first = entry(1, 2, 8, 10.0, 60.0)
    first["contract"] = CONTRACT
    return {"status": "optimal", "search": {"rows": 10, "rows_with_a_fitting_cut": 4, "rows_screened": 10,
                                            "master_solves": 5, "seconds": 0.1},
            "mappings": [first, entry(1, 4, 8, 11.0, 50.0), entry(2, 2, 8, 12.0, 65.0, rank=2),
                         entry(2, 4, 8, 13.0, 55.0, rank=2)]}


def user_dict() -> dict:
    """The problem's own mapping: faster than the front but 300 GB over budget on stage 0."""
    return entry(1, 2, 16, 9.0, 380.0, stage_gb=(380.0, 60.0), feasible=False)


def tiny_png() -> bytes:
    """A valid 4 × 3 PNG standing in for a figure in the structure tests."""
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), "white").save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def quick_figures(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Replace the matplotlib figures with a tiny PNG so that structure tests stay fast."""
    png = tiny_png()
    for name in ("front_scatter", "stage_memory_bars", "stage_times"):
        monkeypatch.setattr(plots, name, lambda *a, **k: png)
    monkeypatch.setattr(report, "scaling_png", lambda sweep: png)
    return png


class Tree(HTMLParser):
    """Collects tags, checks that every non-void element closes in order, and keeps the text."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.rows: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append((dict(attrs).get("class") or "", []))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unbalanced </{tag}>")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.rows and "td" in self.stack[-1:]:
            self.rows[-1][1].append(data)


def parse(html_text: str) -> Tree:
    tree = Tree()
    tree.feed(html_text)
    tree.close()
    return tree


def test_html_report_is_one_valid_file_with_every_table(tmp_path: Path, quick_figures: bytes) -> None:
    """Issue 8 part 3: one self-contained HTML file, the front, the chosen mapping's account (seed 000
    §显存先按最重的 rank 算: memory per stage against usable HBM), the slack table, violations and the
    seed-003 §9 contract table; balanced tags, figures as data URIs only."""
    written = report.write_report(tmp_path / "r.html", solve=solve_dict(), user=user_dict(), title="t")
    assert written == [tmp_path / "r.html"]
    tree = parse(written[0].read_text(encoding="utf-8"))
    assert not tree.errors and not tree.stack
    captions = " ".join(tree.text)
    for needed in ("Returned mappings", "Memory of the heaviest rank per stage", "Slack of every rule",
                   "Violated rules", "Constraint contract (seed 003 §9)", "Step time by part"):
        assert needed in captions
    images = [a["src"] for t, a in tree.tags if t == "img"]
    assert len(images) == 5 and all(src.startswith("data:image/png;base64,") for src in images)
    assert base64.b64decode(images[0].split(",", 1)[1]) == quick_figures
    assert not any(a.get("href") or (t != "img" and a.get("src")) for t, a in tree.tags)


def test_html_escapes_text(tmp_path: Path, quick_figures: bytes) -> None:
    """A rule message carrying markup (memory-fits-hbm, seed 000) is shown as text, never as a tag."""
    text = report.write_report(tmp_path / "r.html", solve=solve_dict(), user=user_dict())[0].read_text("utf-8")
    assert "&lt;script&gt;" in text and "<script>" not in text


def test_user_mapping_marked_in_front_table(tmp_path: Path, quick_figures: bytes) -> None:
    """The user's own (infeasible) mapping is a marked row 'yours' of the front table, with its verdict."""
    tree = parse(report.write_report(tmp_path / "r.html", solve=solve_dict(), user=user_dict())[0]
                 .read_text("utf-8"))
    yours = [(cls, cells) for cls, cells in tree.rows if cells[:1] == ["yours"]]
    assert yours == [("mark", yours[0][1])] and yours[0][1][1] == "infeasible"
    assert plots.user_verdict(user_dict()) == "infeasible: memory-fits-hbm"
    assert "Minimal conflicting rule set: memory-fits-hbm." in " ".join(tree.text)


def test_slack_table_orders_and_marks() -> None:
    """Violated rules, then warnings, then binding rules (marked), then the rest (megatron-rules.yaml
    non-interleaved-disables-p2p-overlap is a warning, experts-divisible-by-ep binding)."""
    t = report.slack_table(user_dict())
    assert [r[3] for r in t.rows] == ["violated", "warning", "binding"]
    assert t.marked == (True, True, True)
    t = report.slack_table(solve_dict()["mappings"][0])
    assert [(r[0], r[3]) for r in t.rows] == [("non-interleaved-disables-p2p-overlap", "warning"),
                                             ("experts-divisible-by-ep", "binding"), ("memory-fits-hbm", "holds")]
    assert t.marked == (True, True, False)


def test_stage_table_marks_over_budget_stages() -> None:
    """Seed 000 §显存先按最重的 rank 算: a stage above the usable HBM is marked, with its negative slack."""
    t = report.stage_table(user_dict())
    assert t.marked == (True, False)
    assert t.rows[0][-2] == "-306.00" and t.header[4:8] == tuple(f"{x} GB" for x in TERMS)


def test_contract_rows_render_with_verdicts() -> None:
    """Seed 003 §9: one row per domain, recorded values with units, failing rows marked."""
    t = report.contract_table(CONTRACT)
    assert [r[0] for r in t.rows] == ["model structure", "training state", "precision"]
    assert t.rows[0][1] == "total parameters = 5,000,000,000,000 params"
    assert t.rows[1][3] == "fails" and t.marked == (False, True, False)


def test_stage_blocks_follow_the_virtual_stage_order() -> None:
    """megatron-groups.md / derived.stage_of_virtual: virtual stage k runs on rank k mod PP, so under
    VPP 2 rank 0 holds the first and the (PP+1)-th chunk."""
    held = report.stage_blocks({"pp": 2, "layout": [2, 3, 1, 2]})
    assert held == {0: "0–1, 5", 1: "2–4, 6–7"}


def test_rank_order_is_shown_when_not_megatrons_default() -> None:
    """megatron-groups.md §1.2: two mappings equal but for --use-tp-pp-dp-mapping are told apart."""
    m = solve_dict()["mappings"][0]["mapping"]
    assert plots.degrees_label(m) == "TP1 PP2 CP1 EP8 ETP1 VPP1 MBS1 full"
    assert plots.degrees_label({**m, "rank_order": "tp-cp-ep-pp-dp"}).endswith("full order tp-cp-ep-pp-dp")
    assert "rank order" in report.front_table([{**solve_dict()["mappings"][0]}], None).header


def sweep_dict() -> dict:
    """A two-size `sweep --json` object: 64 GPUs with the answer above, 128 GPUs without a mapping."""
    return {"problem": "p.yaml", "model": "m", "gpu": "H800", "scaling": "strong",
            "sizes": [{"gpus": 64, "status": "optimal", "mappings": solve_dict()["mappings"],
                       "best": {"step_time_s": 10.0}, "reference": None},
                      {"gpus": 128, "status": "infeasible", "reason": "no row fits", "mappings": [], "best": None,
                       "reference": None}],
            "table": [{"gpus": 64, "status": "optimal", "mapping": "TP1 PP2 CP1 EP8 ETP1 VPP1 MBS1 full",
                       "step_time_s": 10.0, "tokens_per_s_per_gpu": 1000.0, "mfu": 0.3, "scaling_efficiency": 1.0,
                       "marginal_efficiency": None, "num_microbatches": 8, "bubble_fraction": 0.111,
                       "peak_memory_gb": 60.0},
                      {"gpus": 128, "status": "infeasible"}],
            "notes": ["128 GPUs: infeasible: no row fits"]}


def test_sweep_report_has_curve_table_and_notes(tmp_path: Path, quick_figures: bytes) -> None:
    """Issue 8 part 3: a sweep's report shows the scaling curve (the sweep's own scaling_plot), the
    scaling table of `sweep --json` (BRIEF: {"sizes": [{"gpus", "status", "mappings"}]}) and its notes."""
    written = report.write_sweep_report(sweep_dict(), tmp_path / "s.md")
    text = written[0].read_text("utf-8")
    assert [p.name for p in written[1:]] == ["scaling.png"]
    assert "| 64 | optimal | TP1 PP2 CP1 EP8 ETP1 VPP1 MBS1 full | 10.000 | 1,000 | 30.0% | 100.0% | - |" in text
    assert "| 128 | infeasible | - |" in text and "- 128 GPUs: infeasible: no row fits" in text


def test_markdown_report_links_resolve(tmp_path: Path, quick_figures: bytes) -> None:
    """Issue 8 part 3: the .md links every figure in <stem>_files/, each a PNG that exists; tables are
    pipe tables whose rows all have the header's column count."""
    written = report.write_report(tmp_path / "out" / "plan.md", solve=solve_dict(), user=user_dict())
    md = written[0]
    text = md.read_text(encoding="utf-8")
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links and all(link.startswith("plan_files/") for link in links)
    assert sorted(md.parent / link for link in links) == sorted(written[1:])
    for link in links:
        assert (md.parent / link).read_bytes() == quick_figures
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if lines and lines[0].startswith("| "):
            widths = {len(re.split(r"(?<!\\)\|", line)) for line in lines}
            assert len(widths) == 1, block
    assert "**yours** ◀" in text and r"&lt;" not in text and r"\<script\>" in text


def test_report_without_mappings_or_user(tmp_path: Path, quick_figures: bytes) -> None:
    """An infeasible search with no `mapping:` section still writes a report that says so."""
    solve = {"status": "infeasible", "mappings": [], "search": {}}
    text = report.write_report(tmp_path / "r.html", solve=solve)[0].read_text("utf-8")
    assert "No mapping of the search space runs" in text and "<img" not in text


@pytest.mark.parametrize("name", ["r.pdf", "r", "r.html.txt"])
def test_unknown_suffix_is_an_input_error(tmp_path: Path, name: str) -> None:
    """The format comes from the suffix; anything but .html/.htm/.md is refused with a fix."""
    with pytest.raises(InputError, match="report.html"):
        report.write_report(tmp_path / name, solve={"status": "infeasible", "mappings": []})


def test_cli_rejects_bad_report_suffix(tmp_path: Path) -> None:
    """`parasol solve --report x.pdf` is bad input: one paragraph, exit 2, no traceback."""
    problem = Path(__file__).parents[1] / "problems" / "deepseek-v4-pro-1024.yaml"
    result = CliRunner().invoke(main, ["solve", str(problem), "--report", str(tmp_path / "x.pdf"),
                                       "--time-limit", "0.1"])
    assert result.exit_code == 2 and "--report" in result.output and "Traceback" not in result.output


def png_size(png: bytes) -> tuple[int, int]:
    """Decode a PNG fully and return its pixel size."""
    with Image.open(io.BytesIO(png)) as img:
        img.load()
        return img.size


EXPECTED_PX = (round(plots.FIGURE_SIZE_IN[0] * plots.DPI), round(plots.FIGURE_SIZE_IN[1] * plots.DPI))


@pytest.mark.slow
def test_figures_decode_at_fixed_size_and_repeat_bytes() -> None:
    """The three figures are real PNGs of 960 × 540 px; the same input gives the same bytes."""
    solve, user = solve_dict(), user_dict()
    figures = [plots.front_scatter(solve["mappings"], user), plots.stage_memory_bars(user),
               plots.stage_times(user)]
    assert [png_size(f) for f in figures] == [EXPECTED_PX] * 3
    assert plots.front_scatter(solve["mappings"], user) == figures[0]
    assert plots.front_scatter(solve["mappings"]) != figures[0]
    assert png_size(report.scaling_png(sweep_dict())) == EXPECTED_PX


@pytest.mark.slow
def test_cli_report_for_deepseek_v4_pro_1024(tmp_path: Path) -> None:
    """Issue 8 part 3, must show: the DeepSeek-V4-Pro 1,024-GPU report (seed 000) from the CLI, its
    own configuration A marked as infeasible (memory-fits-hbm); the same answer rendered again gives
    the same bytes, and as markdown the same five figures beside it."""
    problem = Path(__file__).parents[1] / "problems" / "deepseek-v4-pro-1024.yaml"
    result = CliRunner().invoke(main, ["solve", str(problem), "--top", "4", "--json",
                                       "--report", str(tmp_path / "a.html")])
    assert result.exit_code == 0, result.output
    solve = json.loads(result.stdout)
    again = report.write_solve_report(load_problem(str(problem)), solve, tmp_path / "b.html")
    assert (tmp_path / "a.html").read_bytes() == again[0].read_bytes()
    tree = parse((tmp_path / "a.html").read_text("utf-8"))
    assert not tree.errors
    assert any(cells[:2] == ["yours", "infeasible"] for cls, cells in tree.rows if cls == "mark")
    images = [a["src"].split(",", 1)[1] for t, a in tree.tags if t == "img"]
    assert len(images) == 5 and {png_size(base64.b64decode(i)) for i in images} == {EXPECTED_PX}
    written = report.write_solve_report(load_problem(str(problem)), solve, tmp_path / "c.md")
    assert sorted(p.name for p in written[1:]) == ["chosen_memory.png", "chosen_times.png", "front.png",
                                                    "yours_memory.png", "yours_times.png"]
