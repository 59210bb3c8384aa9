"""The command line: models, hardware, explain (JSON contract of the BRIEF and exit codes)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from parasol.solver.cli import main

PROBLEM = "problems/deepseek-v4-pro-1024.yaml"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_models_lists_the_catalog() -> None:
    result = run("models", "--json")
    assert result.exit_code == 0
    names = {r["name"] for r in json.loads(result.output)}
    assert {"deepseek-v4-pro", "deepseek-v3", "llama-3.1-405b", "moe-5t"} <= names


def test_hardware_lists_presets() -> None:
    result = run("hardware", "--json")
    assert result.exit_code == 0
    assert {"h800-hgx", "gb200-nvl72", "asic-5t"} <= set(json.loads(result.output))


def test_explain_json_has_the_briefs_keys() -> None:
    """BRIEF 'What the CLI looks like': feasible, derived{dp_attn, dp_expert, num_microbatches,
    bubble_fraction}, violations, constraints, metrics, stages, repairs, mapping."""
    result = run("explain", PROBLEM, "--set", "pp=16", "--set", "recompute=full", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in ("feasible", "derived", "violations", "constraints", "metrics", "stages", "repairs", "mapping"):
        assert key in data
    assert {"dp_attn", "dp_expert", "num_microbatches", "bubble_fraction"} <= set(data["derived"])
    assert set(data["mapping"]) >= {"gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len",
                                    "recompute", "layout"}
    assert data["mapping"]["layout"] == [s["layers"] for s in data["stages"]]
    assert sum(data["mapping"]["layout"]) == 61
    assert data["feasible"] is True
    assert all({"rule", "slack", "binding"} <= set(c) for c in data["constraints"])


def test_explain_infeasible_exits_1_and_names_the_rule() -> None:
    result = run("explain", PROBLEM, "--set", "ep=80", "--json")
    assert result.exit_code == 1
    rules = {v["rule"] for v in json.loads(result.output)["violations"]}
    assert {"experts-divisible-by-ep", "world-divisible-by-expert-grid"} <= rules


def test_explain_bad_set_exits_2_without_traceback() -> None:
    result = run("explain", PROBLEM, "--set", "tp=zero")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "tp" in result.output


def test_explain_human_output_prints_the_ledger() -> None:
    result = run("explain", PROBLEM, "--set", "pp=16", "--set", "recompute=full", "--full")
    assert result.exit_code == 0
    assert "Memory of the heaviest rank per stage" in result.output
    assert "FEASIBLE" in result.output


def test_explain_judges_degrees_beyond_the_world_and_the_blocks() -> None:
    """A degree above the GPU count, or more virtual stages than blocks, is a verdict (exit 1) naming the
    rule, quickly (it once hung building a layout of 2^20 stages; no default cut exists there)."""
    for flag, rule in (("pp=1048576", "world-divisible-by-model-size"), ("vpp=1000", "virtual-stages-within-blocks")):
        result = run("explain", PROBLEM, "--set", flag, "--json")
        assert result.exit_code == 1, result.output
        assert rule in {v["rule"] for v in json.loads(result.output)["violations"]}


