"""Answers a person can read: explain on one screen, tables that fit, unknown Megatron flags refused,
repairs that mend settings and cuts, the Python API (its JSON equal to the CLI's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.table import Table

import parasol
from parasol.errors import InputError
from parasol.problems.megatron.flags import megatron_flag_names
from parasol.problems.megatron.launch import parse_launch
from parasol.solver.cli import main
from parasol.solver.diagnose.conflicts import conflict_note
from parasol.solver.outputs.render import records, table_text
from parasol.solver.outputs.summary import signed

ROOT = Path(__file__).resolve().parents[1]
DSV4 = str(ROOT / "problems" / "deepseek-v4-pro-1024.yaml")
LLAMA = ["--hardware", "h100-hgx", "--gpus", "256", "--model", "llama-3.1-70b", "--megatron-args",
         "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --seq-length 8192 "
         "--global-batch-size 512 --micro-batch-size 1 --bf16 --lr 1e-4"]


def test_explain_fits_one_screen() -> None:
    """The quick-start mapping: verdict, broken rule, minimal conflict and repairs within 50 lines; no
    contract table (the problem has no `contract:`)."""
    out = CliRunner().invoke(main, ["explain", DSV4])
    assert out.exit_code == 1
    lines = out.output.splitlines()
    assert len(lines) <= 50, out.output
    assert "INFEASIBLE" in lines[3] and "memory-fits-hbm" in out.output
    assert "Minimal conflict" in out.output and "Best repairs" in out.output
    assert "contract" not in out.output.lower()
    assert re.search(r"step time +[\d.]+ s", out.output) and "MFU" in out.output


def test_explain_full_keeps_every_table() -> None:
    full = CliRunner().invoke(main, ["explain", DSV4, "--full"]).output
    assert "Memory of the heaviest rank per stage" in full and "Parallel groups" in full


def test_dense_model_shows_no_moe_fields() -> None:
    out = CliRunner().invoke(main, ["explain", *LLAMA])
    assert out.exit_code in (0, 1)
    assert "ETP" not in out.output and "expert" not in out.output.lower()
    assert "not modelled (1 known Megatron flag(s)" in out.output and "--lr 1e-4" in out.output


def test_conflict_wording_is_checked() -> None:
    """'mending it makes the mapping pass' only when no other rule is broken."""
    assert "makes the mapping pass" in conflict_note(["a"], ["a"])
    other = conflict_note(["a"], ["a", "b"])
    assert "makes the mapping pass" not in other and "b" in other
    assert "all of them" in conflict_note(["a", "b"], ["a", "b"])


def test_unknown_megatron_flag_is_an_error_with_a_suggestion() -> None:
    with pytest.raises(InputError, match="did you mean --tensor-model-parallel-size"):
        parse_launch("--tensor-model-paralel-size 8 --num-layers 4")


PARASOL_OPTIONS = {"--set", "--gpus", "--megatron-args-file", "--decoder-first"}
"""parasol's own options and a prefix named in messages, which launch.py quotes beside Megatron flags."""


def test_every_flag_parasol_reads_is_known() -> None:
    """No reader of problems/megatron or the emitter uses a flag the unknown-flag check would refuse."""
    known = megatron_flag_names() | PARASOL_OPTIONS
    sources = [ROOT / "problems" / "megatron" / name for name in ("launch.py", "model_flags.py", "patterns.py")]
    used = {m for p in sources for m in re.findall(r"""["'](--[a-z][a-z0-9-]*[a-z0-9])["']""",
                                                 p.read_text(encoding="utf-8"))}
    assert sorted(used - known) == []


def test_full_recompute_without_method_is_mended_by_flags() -> None:
    """--recompute-granularity full without a method: the repairs add the flags, never turn recompute off."""
    ex = parasol.explain(DSV4, megatron_args="--recompute-granularity full")
    repairs = ex.as_dict()["repairs"]
    assert repairs and all(r["options"].get("recompute_method") == "uniform" for r in repairs)
    assert all(r["mapping"]["recompute"] == "full" for r in repairs)
    ranked = [(len(r["changes"]), r["step_time_s"]) for r in repairs]
    assert ranked == sorted(ranked)


def test_wide_table_prints_records_with_whole_cells() -> None:
    table = Table(title="t")
    for col in ("name", "a long column header", "another long column header", "third"):
        table.add_column(col)
    table.add_row("qwen3-235b-a22b", "16,384", "36.7891", "gb200-nvl72")
    from rich.console import Console
    console = Console(width=40, record=True)
    console.print(records(table, 40))
    text = console.export_text()
    for cell in ("qwen3-235b-a22b", "16,384", "36.7891", "gb200-nvl72"):
        assert cell in text
    assert table_text(table, "csv").splitlines()[1] == 'qwen3-235b-a22b,"16,384",36.7891,gb200-nvl72'


def test_piped_models_table_names_are_whole() -> None:
    out = CliRunner().invoke(main, ["models"]).output
    assert "qwen3-235b-a22b" in out and "llama-3.1-405b" in out and "…" not in out


def test_slack_never_prints_minus_zero() -> None:
    assert signed(-1e-9) == "0" and signed(-2.5) == "-2.5"


def test_api_explain_json_equals_cli_json() -> None:
    cli = json.loads(CliRunner().invoke(main, ["explain", DSV4, "--set", "recompute=full", "--json"]).output)
    api = json.loads(parasol.explain(DSV4, recompute="full").to_json())
    assert api == cli


def test_api_loads_a_catalog_model_and_a_dict() -> None:
    p = parasol.load("llama-3.1-8b", hardware="h100-hgx", gpus=8, global_batch=16)
    assert p.gpus == 8 and p.model.name == "llama-3.1-8b"
    q = parasol.load({"model": "llama-3.1-8b", "hardware": {"preset": "h100-hgx", "gpus": 8},
                      "training": {"seq_len": 4096, "global_batch": 16}})
    assert parasol.explain(q, tp=8).feasible
    with pytest.raises(InputError):
        parasol.load("llama-3.1-8b")


def test_infeasible_solve_names_the_blocking_rule_and_the_change() -> None:
    """5t-moe-asic-64: every row breaks contract-state-min-devices; the smallest change is the GPU count
    the state needs (seed 003 §2), named before the memory ledger."""
    from parasol.constraints.rules.contract import state_min_devices
    from parasol.problems.loader import load_problem
    from parasol.solver.diagnose.blocking import blocking_rules

    problem = load_problem(ROOT / "problems" / "5t-moe-asic-64.yaml")
    blockers = blocking_rules(problem)
    assert blockers[0].rule == "contract-state-min-devices"
    assert blockers[0].change.startswith(f"needs GPUs ≥ {state_min_devices(problem):,}")
    memory = next(b for b in blockers if b.rule == "memory-fits-hbm")
    assert "optimizer state" in memory.change


def test_rows_with_more_virtual_stages_than_blocks_are_judged_on_their_memory_too() -> None:
    """DeepSeek-V2 (60 blocks) on 8 ASIC-5T devices fits no row in memory, and the sampled rows include PP 4 at
    VPP 16: 64 virtual stages, which only an explicit layout with empty edge stages holds. Judged without one
    (the implicit split refuses it), that row's memory was never judged, so memory-fits-hbm was not broken by
    every row and the infeasible answer named no blocking rule. It is judged on its default cut now, as the
    solver judges rows, and the answer names the memory shortfall."""
    from parasol.problems.loader import load_problem_text
    from parasol.solver.diagnose.blocking import blocking_rules

    problem = load_problem_text("model: deepseek-v2\ntraining: {seq_len: 16384, global_batch: 512}\n"
                                "hardware: {preset: asic-5t, gpus: 8}\n")
    blockers = blocking_rules(problem)
    assert [b.rule for b in blockers] == ["memory-fits-hbm"]
    assert "GB less per GPU" in blockers[0].change and "optimizer state" in blockers[0].change


def test_tp_across_nvlink_is_a_warning_or_an_error(tmp_path: Path) -> None:
    """TP16 on 8-GPU HGX nodes: a counted warning by default; `framework.tp_across_nvlink: error` makes it
    an error, and CP-SAT agrees with Python under the pinned mapping."""
    base = {"model": "llama-3.1-8b", "hardware": {"preset": "h100-hgx", "gpus": 32},
            "training": {"seq_len": 4096, "global_batch": 64}}
    warned = parasol.explain(base, tp=16).as_dict()
    assert "tp-group-inside-nvlink-domain" in {w["rule"] for w in warned["warnings"]}
    strict = {**base, "framework": {"tp_across_nvlink": "error"}}
    data = parasol.explain(strict, tp=16).as_dict()
    assert not data["feasible"]
    assert {v["rule"] for v in data["violations"]} == {"tp-group-inside-nvlink-domain"}
    assert data["minimal_conflict"] == ["tp-group-inside-nvlink-domain"]
    assert all(r["mapping"]["tp"] <= 8 for r in data["repairs"]) and data["repairs"]
    assert parasol.explain(strict, tp=8).feasible


def test_hf_config_model_is_named_after_the_published_name(tmp_path: Path) -> None:
    """`_name_or_path` names the model (not the folder the config sits in); `name:` beside hf_config wins."""
    from parasol.problems.model.hf_config import architecture_from_hf_config

    config = {"model_type": "llama", "_name_or_path": "meta-llama/Llama-3.1-8B", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu"}
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert architecture_from_hf_config(folder / "config.json").name == "Llama-3.1-8B"
    problem = parasol.load({"model": {"hf_config": str(folder / "config.json"), "name": "mine"},
                            "hardware": {"preset": "h100-hgx", "gpus": 8},
                            "training": {"seq_len": 4096, "global_batch": 16}})
    assert problem.model.name == "mine"


def test_api_sweep_of_a_dict_equals_the_cli(tmp_path: Path) -> None:
    """parasol.sweep on a problem given as a dict (written to a temporary file for the workers) has the
    content of `parasol sweep --json` on the same problem file (timings aside)."""
    import yaml
    from inline_problems import SMALL_MOE

    text = SMALL_MOE + "search: {tp: 1, pp: [1, 2], cp: 1, ep: [1, 2], etp: 1, vpp: 1, mbs: 1, recompute: none}\n"
    path = tmp_path / "small.yaml"
    path.write_text(text, encoding="utf-8")
    api = parasol.sweep(yaml.safe_load(text), [8, 16]).as_dict()
    cli = json.loads(CliRunner().invoke(main, ["sweep", str(path), "--gpus", "8,16", "--backend", "serial",
                                               "--json"]).stdout)
    for data in (api, cli):
        data.pop("run")
        data.pop("problem", None)
        for size in data["sizes"]:
            size["search"].pop("seconds", None)
    assert api == cli


def test_selective_launch_line_gets_full_recompute_flags() -> None:
    """A launch line with selective recompute: repairs that switch to full recompute add the flags full
    recompute needs instead of failing on recompute-full-needs-method."""
    ex = parasol.explain(DSV4, megatron_args="--recompute-granularity selective --recompute-modules moe_act")
    full = [r for r in ex.as_dict()["repairs"] if r["mapping"]["recompute"] == "full"]
    assert full and all(r["options"] == {"recompute_method": "uniform", "recompute_num_layers": 1} for r in full)


@pytest.mark.parametrize("tp", [1, 2, 3, 4, 8, 16])
def test_placement_rule_agrees_with_cp_sat_as_an_error(tp: int) -> None:
    """As an error, the TP placement rule's CP-SAT posting holds exactly when its Python slack is >= 0."""
    from ortools.sat.python import cp_model

    from parasol.constraints.evaluate import facts_for
    from parasol.constraints.rules.registry import active_constraints
    from parasol.problems.mapping_input import build_mapping
    from parasol.solver.diagnose.compile import compile_rules, fixed_domains
    from parasol.solver.search.cpsat import DIAGNOSIS_LIMIT_S, deterministic_solver

    problem = parasol.load({"model": "llama-3.1-8b", "hardware": {"preset": "h100-hgx", "gpus": 48},
                            "training": {"seq_len": 4096, "global_batch": 96},
                            "framework": {"tp_across_nvlink": "error"}})
    mapping = build_mapping(problem, {"tp": str(tp)})
    rule = next(r for r in active_constraints(problem) if r.id == "tp-group-inside-nvlink-domain")
    compiled = compile_rules(problem, [rule], fixed_domains(mapping), problem.spec.framework.options, fixed=mapping)
    compiled.model.AddAssumptions([compiled.literals[rule.id]])
    status = deterministic_solver(DIAGNOSIS_LIMIT_S, presolve=False).Solve(compiled.model)
    holds = rule.slack(facts_for(problem, mapping)) >= 0
    assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == holds == (8 % tp == 0)


def test_readme_first_example_is_current(tmp_path: Path) -> None:
    """The README's first example (its YAML and the printed `parasol explain` output) matches a fresh run."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A first problem", 1)[1].split("\n## ", 1)[0]
    problem = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "llama.yaml"
    path.write_text(problem, encoding="utf-8")
    result = CliRunner().invoke(main, ["explain", str(path)])
    assert result.exit_code == 1
    assert result.output == shown


def test_recut_skips_mappings_whose_grids_do_not_divide() -> None:
    """A mapping whose D_a does not divide the batch (GBS 3) gets no cut search, and explain ends cleanly."""
    import yaml
    from inline_problems import SMALL_MOE

    result = parasol.explain(yaml.safe_load(SMALL_MOE), gbs=3, pp=1)
    assert result.as_dict()["mapping"]["gbs"] == 3


def test_uneven_layout_and_full_recompute_repair_llama_405b_on_pp16() -> None:
    """Llama 3.1 405B (126 layer slots) on PP16: Megatron's even split is refused and memory overflows;
    the repair is an explicit uneven cut with full recompute (and the flags full recompute needs)."""
    out = CliRunner().invoke(main, [
        "explain", "--hardware", "h100-hgx", "--gpus", "16384", "--model", "llama-3.1-405b", "--json",
        "--megatron-args", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --seq-length 8192 "
                           "--global-batch-size 2048 --micro-batch-size 1 --bf16 --use-distributed-optimizer"])
    data = json.loads(out.stdout)
    assert {v["rule"] for v in data["violations"]} == {"layers-divisible-by-pp", "memory-fits-hbm"}
    repair = data["repairs"][0]
    assert repair["mapping"]["recompute"] == "full" and "layout" in repair["changes"]
    assert repair["options"] == {"recompute_method": "uniform", "recompute_num_layers": 1}
    assert repair["peak_memory_gb"] <= data["metrics"]["usable_hbm_gb"]


def test_api_explain_takes_settings_like_set() -> None:
    """Keyword pins that are training settings or options (as `--set` takes them) reach the problem."""
    cli = json.loads(CliRunner().invoke(main, ["explain", DSV4, "--set", "recompute=full", "--set",
                                               "overlap_grad_reduce=false", "--json"]).output)
    api = parasol.explain(DSV4, recompute="full", overlap_grad_reduce=False).as_dict()
    assert api == cli
