"""The configurations of reference/megatron-cases.yaml judged by parasol: the verdict Megatron
gives each one, the rule that rejects it, and the derived dp / edp / microbatches.

Megatron does not judge memory, so the memory rule is left out of these verdicts. C02, C03 and C05 are
rejected by the interleaved-schedule rules of constraints/rules/schedule.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from parasol.constraints.core.base import Family
from parasol.constraints.evaluate import Evaluation, evaluate
from parasol.constraints.rules.registry import active_constraints
from parasol.problems.loader import Problem, load_problem_text
from parasol.problems.mapping import Mapping

REFERENCE = Path(__file__).resolve().parents[1] / "reference"
CASES = {case["id"]: case for case in yaml.safe_load((REFERENCE / "megatron-cases.yaml").read_text())}
HEAD_DIM = 128
# Case keys that are Megatron flags parasol carries in framework.options.
OPTION_KEYS = ("overlap_p2p_comm", "moe_token_dispatcher_type", "microbatch_group_size_per_vp_stage")


def inline_problem(*, gpus: int, layers: int, heads: int, groups: int | None = None, experts: int | None = None,
                   hidden: int | None = None, seq_len: int = 4096, gbs: int = 64, training: dict | None = None,
                   options: dict | None = None, model: dict | None = None) -> Problem:
    """A problem with an inline GQA model (hidden = heads·128 unless given, dense ffn 4·hidden or `experts`
    routed experts of width hidden, top-2) on `gpus` H100s; `training`, `options`, `model` add fields."""
    hidden = hidden or heads * HEAD_DIM
    arch: dict = {
        "name": "inline", "hidden_size": hidden, "vocab_size": 32000, "num_layers": layers,
        "attention": {"kind": "gqa", "num_heads": heads, "num_kv_heads": groups or heads, "head_dim": HEAD_DIM},
    }
    if experts:
        arch["moe"] = {"num_experts": experts, "top_k": 2, "expert_intermediate_size": hidden}
    else:
        arch["dense_mlp"] = {"intermediate_size": 4 * hidden}
    arch |= model or {}
    spec = {
        "model": arch,
        "training": {"seq_len": seq_len, "global_batch": gbs, **(training or {})},
        "hardware": {"preset": "h100-hgx", "gpus": gpus},
        "framework": {"rule_packs": ["megatron-core"], "options": options or {}},
    }
    return load_problem_text(yaml.safe_dump(spec, sort_keys=False), source="<inline>")


def case_problem(config: dict, **options: object) -> Problem:
    """The inline problem of one megatron-cases.yaml configuration."""
    opts = {key: config[key] for key in OPTION_KEYS if key in config} | options
    return inline_problem(
        gpus=config["world_size"], layers=config["num_layers"], heads=config["num_attention_heads"],
        groups=config.get("num_query_groups"), experts=config.get("num_experts"), seq_len=config["seq_length"],
        gbs=config["gbs"], training={"micro_batch": config["mbs"], "sequence_parallel": config["sequence_parallel"]},
        options=opts)


def case_mapping(config: dict) -> Mapping:
    """The mapping of one configuration (ETP absent means Megatron's default ETP := TP)."""
    return Mapping(gpus=config["world_size"], tp=config["tp"], pp=config["pp"], cp=config["cp"], ep=config["ep"],
                   etp=config.get("etp"), vpp=config.get("vpp", 1), mbs=config["mbs"], gbs=config["gbs"],
                   seq_len=config["seq_length"])


def megatron_verdict(problem: Problem, mapping: Mapping) -> Evaluation:
    """Every active rule but memory (Megatron does not judge memory)."""
    rules = tuple(r for r in active_constraints(problem) if r.family is not Family.memory)
    return evaluate(problem, mapping, rules=rules)


def judge(case_id: str, **options: object) -> tuple[dict, Evaluation]:
    """The case and parasol's evaluation of it."""
    case = CASES[case_id]
    problem = case_problem(case["config"], **options)
    return case, megatron_verdict(problem, case_mapping(case["config"]))


def violated(ev: Evaluation) -> set[str]:
    return {v.rule for v in ev.violations}


def assert_derived(case: dict, ev: Evaluation) -> None:
    """dp, edp and num_microbatches as Megatron derives them (the keys the case lists)."""
    d, want = ev.facts.derived, case["derived"]
    if "dp" in want:
        assert d.dp_attn == want["dp"]
    if "edp" in want:
        assert d.dp_expert == want["edp"]
    if "num_microbatches" in want:
        assert d.num_microbatches == want["num_microbatches"]
    assert ev.facts.mapping.expert_tp == want["etp_effective"]


@pytest.mark.parametrize("case_id", ["C01-seedB-no-vpp", "C04-1024gpu-ep64-vpp2"])
def test_valid_cases(case_id: str) -> None:
    """megatron-cases.yaml C01, C04: Megatron accepts them (C01: 1F1B with M 4 < PP 8)."""
    case, ev = judge(case_id)
    assert ev.feasible, [v.message for v in ev.violations]
    assert_derived(case, ev)


@pytest.mark.parametrize("case_id", [
    "C02-seedB-vpp2", "C03-seedB-vpp2-group4", "C05-vpp-remainder", "C06-experts-not-divisible-by-ep",
    "C07-gbs-not-divisible", "C08-cp-seq-not-divisible", "C10-world-not-divisible", "C11-expert-grid-not-divisible",
    "C12-heads-not-divisible-by-tp", "C13-query-groups-vs-tp",
])
def test_rejected_cases(case_id: str) -> None:
    """megatron-cases.yaml C02-C08, C10-C13: rejected, the named rule (and also_violates) among the violations."""
    case, ev = judge(case_id)
    expected = case["expected"]
    assert not ev.feasible
    assert {expected["rule"], *expected.get("also_violates", [])} <= violated(ev)
    assert_derived(case, ev)


@pytest.mark.parametrize("case_id", [
    "C06-experts-not-divisible-by-ep", "C07-gbs-not-divisible", "C08-cp-seq-not-divisible",
    "C10-world-not-divisible", "C11-expert-grid-not-divisible", "C12-heads-not-divisible-by-tp",
    "C13-query-groups-vs-tp",
])
def test_messages_carry_megatrons(case_id: str) -> None:
    """megatron-cases.yaml expected.message: the rejecting rule's message quotes Megatron's, with the numbers."""
    case, ev = judge(case_id)
    expected = case["expected"]
    named = next(v for v in ev.violations if v.rule == expected["rule"])
    assert expected["message"].rstrip(".") in named.message


def test_c07_eval_check_comes_first() -> None:
    """megatron-cases.yaml C07: the eval check (stage A) is reported before the training check (stage G),
    which carries Megatron's training_rule_message."""
    _, ev = judge("C07-gbs-not-divisible")
    order = [v.rule for v in ev.violations]
    assert order.index("eval-gbs-divisible") < order.index("gbs-divisible-by-mbs-dp")
    training = CASES["C07-gbs-not-divisible"]["expected"]["training_rule_message"]
    assert training in ev.violations[order.index("gbs-divisible-by-mbs-dp")].message


def test_c09_cli_accepts_with_warning() -> None:
    """megatron-cases.yaml C09: the CLI switches SP off at TP 1 with a warning and accepts the mapping."""
    case, ev = judge("C09-sp-without-tp")
    assert ev.feasible
    assert "sp-auto-disabled-when-tp1" in {w.rule for w in ev.warnings}
    assert case["expected"]["message"] in next(w.message for w in ev.warnings if w.rule == "sp-auto-disabled-when-tp1")
    assert_derived(case, ev)


def test_c09_core_api_rejects() -> None:
    """megatron-cases.yaml C09 (mcore_api_verdict): a Megatron Core config with SP and TP 1 is rejected."""
    case, ev = judge("C09-sp-without-tp", megatron_core_api=True)
    assert not ev.feasible
    assert violated(ev) == {case["expected"]["mcore_api_rule"]}
    assert "sp-auto-disabled-when-tp1" not in {w.rule for w in ev.warnings}
