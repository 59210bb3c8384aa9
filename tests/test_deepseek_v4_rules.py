"""DeepSeek-V4 rule pack and the seed-claims pack on problems/deepseek-v4-pro-8192.yaml.

Sources: seed 000 §先确定模型与实现 (the V4 path's restrictions), §CP (C: 8192/4 = 2,048 local rows
against D_window 128); reference/megatron-rules.yaml ids dsv4-*, hybrid-pattern-*,
contiguous-cp-mtp-tp-sp, packing-scheduler-moe-dispatcher; megatron-groups.md §3 (seed claims that
Megatron dev@d48bd6be does not enforce). Every case also checks that CP-SAT agrees with Python.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ortools.sat.python import cp_model

from parasol.constraints.core.base import Constraint, Facts
from parasol.constraints.core.consts import model_consts
from parasol.constraints.core.decision_vars import DecisionVars
from parasol.constraints.rules.deepseek_v4 import DSV4_RULES
from parasol.constraints.rules.seed_claims import SEED_CLAIM_RULES
from parasol.hardware.gpu import compute_capability
from parasol.problems.derived import derive
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping import DEGREES, Mapping
from parasol.problems.model.architecture import window_rows
from parasol.problems.options import MegatronOptions

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
SEED_8192 = PROBLEMS / "deepseek-v4-pro-8192.yaml"
RULES: tuple[Constraint, ...] = tuple(rule() for rule in DSV4_RULES + SEED_CLAIM_RULES)
SOLVER = cp_model.CpSolver()  # one solver for every check: building one costs more than a solve
SOLVER.parameters.num_workers = 1


@pytest.fixture(scope="module")
def seed_problem() -> Problem:
    return load_problem(SEED_8192)


def variant(*edits: tuple[str, str]) -> Problem:
    """The bundled 8,192-GPU problem with pieces of its text replaced (old, new)."""
    text = SEED_8192.read_text(encoding="utf-8")
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    return load_problem_text(text, source=str(SEED_8192), base_dir=PROBLEMS)


def seed_mapping(**changes: int | str) -> Mapping:
    """Seed 000's configuration B (TP1 PP8 CP1 EP64 ETP1, MBS 1, GBS 4096, S 8192) with changes."""
    values = {"gpus": 8192, "tp": 1, "pp": 8, "cp": 1, "ep": 64, "etp": 1, "mbs": 1, "gbs": 4096,
              "seq_len": 8192} | changes
    return Mapping(**values)


def cpsat_holds(problem: Problem, rule: Constraint, mapping: Mapping, options: MegatronOptions) -> bool:
    """Whether the rule's CP-SAT posting admits the mapping (every degree fixed, literal forced)."""
    model = cp_model.CpModel()
    domains = {name: [getattr(mapping, name) if name != "etp" else mapping.expert_tp] for name in DEGREES}
    v = DecisionVars.create(model, mapping.gpus, mapping.gbs, mapping.seq_len, domains,
                            [mapping.recompute.value], model_consts(problem))
    v.options = options
    enforce = model.NewBoolVar("enforce")
    model.Add(enforce == 1)
    rule.post(model, v, enforce)
    return SOLVER.Solve(model) in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def judge(problem: Problem, mapping: Mapping, options: MegatronOptions | None = None) -> dict[str, tuple]:
    """rule id -> (slack, message) for every active V4/seed rule; asserts CP-SAT agrees on each."""
    opts = options if options is not None else problem.spec.framework.options
    facts = Facts(problem, mapping, derive(problem.model, mapping), opts)
    out = {}
    for rule in RULES:
        if not rule.active(problem):
            continue
        slack = rule.slack(facts)
        assert cpsat_holds(problem, rule, mapping, opts) == (slack >= 0), rule.id
        out[rule.id] = (slack, rule.message(facts))
    return out


def failing(verdicts: dict[str, tuple]) -> set[str]:
    return {rule for rule, (slack, _) in verdicts.items() if slack < 0}


def test_seed_b_passes_every_v4_rule(seed_problem: Problem) -> None:
    """Seed 000 B (TP1 PP8 CP1 EP64) meets the V4 path's restrictions (seed 000 §先确定模型与实现)."""
    verdicts = judge(seed_problem, seed_mapping())
    assert {r.id for r in RULES if r.pack.value == "deepseek-v4"} <= set(verdicts)
    assert failing(verdicts) == set()


def test_seed_c_local_rows_hold_with_1920_rows_to_spare(seed_problem: Problem) -> None:
    """Seed 000 §CP: C has 8192/4 = 2,048 local rows against D_window = 128 (cp_utils.py:128-139)."""
    assert window_rows(seed_problem.model.attention) == 128
    verdicts = judge(seed_problem, seed_mapping(cp=4))
    slack, message = verdicts["dsv4-cp-local-rows-ge-window"]
    assert slack == 2048 - 128 == 1920
    assert "local_rows=2048, D_window=128" in message
    assert failing(verdicts) == set()


def test_local_rows_boundary(seed_problem: Problem) -> None:
    """megatron-rules.yaml dsv4-cp-local-rows-ge-window: CP64 leaves exactly 128 rows, CP128 only 64."""
    assert judge(seed_problem, seed_mapping(cp=64))["dsv4-cp-local-rows-ge-window"][0] == 0
    slack, message = judge(seed_problem, seed_mapping(cp=128))["dsv4-cp-local-rows-ge-window"]
    assert slack == -64
    assert "local_rows=64, D_window=128" in message


def test_tp2_breaks_dsv4_tp1(seed_problem: Problem) -> None:
    """megatron-rules.yaml dsv4-tp1: 'DSv4 Hybrid Attention only supports TP size 1.'"""
    verdicts = judge(seed_problem, seed_mapping(tp=2, etp=1))
    slack, message = verdicts["dsv4-tp1"]
    assert slack == -1
    assert "only supports TP size 1" in message


def test_cp4_without_packed_input_is_rejected() -> None:
    """megatron-rules.yaml dsv4-cp-requires-thd: CP > 1 needs packed THD input (seed 000: CP>1 要求
    packed THD 输入)."""
    problem = variant(("packed_sequences: true", "packed_sequences: false"))
    verdicts = judge(problem, seed_mapping(cp=4))
    assert verdicts["dsv4-cp-requires-thd"][0] == -3
    assert "qkv_format='thd'" in verdicts["dsv4-cp-requires-thd"][1]
    assert judge(problem, seed_mapping())["dsv4-cp-requires-thd"][0] == 0


def test_cp4_needs_contiguous_partition(seed_problem: Problem) -> None:
    """megatron-rules.yaml dsv4-cp-contiguous: Megatron's default zigzag is rejected for CP > 1."""
    zigzag = seed_problem.spec.framework.options.model_copy(update={"cp_partition_mode": "zigzag"})
    assert failing(judge(seed_problem, seed_mapping(cp=4), zigzag)) == {"dsv4-cp-contiguous"}
    assert failing(judge(seed_problem, seed_mapping(), zigzag)) == set()


def test_selective_recompute_with_default_modules_is_rejected() -> None:
    """megatron-rules.yaml dsv4-no-core-attn-recompute: Megatron's recompute_modules default to
    ['core_attn'], so plain selective recompute is rejected; listing [moe_act] is accepted."""
    default_modules = variant(("  recompute_modules: [moe_act]\n", ""))
    assert default_modules.training.recompute_modules == ("core_attn",)
    verdicts = judge(default_modules, seed_mapping(recompute="selective"))
    assert failing(verdicts) == {"dsv4-no-core-attn-recompute"}
    assert "Checkpoint core attention is not supported" in verdicts["dsv4-no-core-attn-recompute"][1]
    assert failing(judge(default_modules, seed_mapping(recompute="full"))) == set()
    assert failing(judge(load_problem(SEED_8192), seed_mapping(recompute="selective"))) == set()


def test_kernel_backend_and_sm(seed_problem: Problem) -> None:
    """megatron-rules.yaml dsv4-kernel-backend: tilelang is rejected; cudnn needs SM >= 90 (H800 is
    SM90, A100 SM80)."""
    options = seed_problem.spec.framework.options
    tilelang = options.model_copy(update={"dsa_kernel_backend": "tilelang"})
    assert failing(judge(seed_problem, seed_mapping(), tilelang)) == {"dsv4-kernel-backend"}
    assert compute_capability("H800-SXM-80GB") == 90
    a100 = variant(("preset: h800-hgx", "preset: a100-hgx"))
    assert failing(judge(a100, seed_mapping())) == {"dsv4-kernel-backend"}
    fallback = options.model_copy(update={"dsa_kernel_backend": "none"})
    assert failing(judge(a100, seed_mapping(), fallback)) == set()


def test_qkv_linear_offload_is_rejected(seed_problem: Problem) -> None:
    """megatron-rules.yaml dsv4-no-qkv-linear-offload."""
    offload = seed_problem.spec.framework.options.model_copy(update={"offload_modules": ("qkv_linear",)})
    assert failing(judge(seed_problem, seed_mapping(), offload)) == {"dsv4-no-qkv-linear-offload"}


def test_hybrid_pattern_segments_fix_pp_times_vpp(seed_problem: Problem) -> None:
    """megatron-rules.yaml hybrid-pattern-segments-divisible: 16 `|` segments on PP8 mean VPP 2;
    hybrid-pattern-excludes-vpp-args and -pipes-exclude-uneven: no layout string, no first/last override."""
    pattern = "|".join(["C"] * 16) + "/C"
    options = seed_problem.spec.framework.options.model_copy(update={"hybrid_layer_pattern": pattern})
    assert failing(judge(seed_problem, seed_mapping(vpp=2), options)) == set()
    verdicts = judge(seed_problem, seed_mapping(), options)
    assert verdicts["hybrid-pattern-segments-divisible"][0] == -8
    assert "VPP 2" in verdicts["hybrid-pattern-segments-divisible"][1]
    odd = options.model_copy(update={"hybrid_layer_pattern": "C|C|C"})
    assert "Got 3 segments and 8 pipeline parallel size" in judge(seed_problem, seed_mapping(), odd)[
        "hybrid-pattern-segments-divisible"][1]
    clash = options.model_copy(update={"pipeline_model_parallel_layout": "Et*61|L",
                                       "decoder_first_pipeline_num_layers": 7})
    assert failing(judge(seed_problem, seed_mapping(vpp=2), clash)) == {
        "hybrid-pattern-excludes-vpp-args", "hybrid-pattern-pipes-exclude-uneven"}


def test_contiguous_cp_with_mtp_tp_and_sp_is_a_known_bug(seed_problem: Problem) -> None:
    """megatron-rules.yaml contiguous-cp-mtp-tp-sp (V4-Pro has one MTP block; SP is on by default)."""
    verdicts = judge(seed_problem, seed_mapping(tp=2, cp=2, etp=1))
    assert {"contiguous-cp-mtp-tp-sp", "dsv4-tp1"} <= failing(verdicts)
    assert "contiguous-cp-mtp-tp-sp" not in failing(judge(seed_problem, seed_mapping(tp=2, etp=1)))


def test_packing_needs_alltoall_or_flex_dispatcher(seed_problem: Problem) -> None:
    """megatron-rules.yaml packing-scheduler-moe-dispatcher: Megatron's default allgather is rejected."""
    options = seed_problem.spec.framework.options.model_copy(update={"moe_token_dispatcher_type": "allgather"})
    verdicts = judge(seed_problem, seed_mapping(), options)
    assert failing(verdicts) == {"packing-scheduler-moe-dispatcher"}
    assert "got 'allgather'" in verdicts["packing-scheduler-moe-dispatcher"][1]


def test_v4_rules_do_not_apply_to_llama() -> None:
    """The V4 pack concerns DSv4 hybrid attention only (megatron-rules.yaml dsv4-*: 'dsv4_hybrid ->')."""
    text = ("model: llama-3.1-8b\ntraining: {seq_len: 8192, global_batch: 512}\n"
            "hardware: {preset: h100-hgx, gpus: 64}\n"
            "framework: {rule_packs: [megatron-core, deepseek-v4, seed-claims]}\n")
    llama = load_problem_text(text, source="llama.yaml")
    assert [r.id for r in RULES if r.active(llama) and r.pack.value != "megatron-core"] == []


def test_contiguous_cp_and_dynamic_cp_rules_judge_every_model() -> None:
    """megatron-rules.yaml contiguous-cp-variants (contiguous CP > 1 only for dsv4_hybrid),
    contiguous-cp-requires-packing-scheduler and dynamic-cp-restrictions (per-token loss, packed input)."""
    text = ("model: llama-3.1-8b\ntraining: {seq_len: 8192, global_batch: 512, packed_sequences: true}\n"
            "hardware: {preset: h100-hgx, gpus: 64}\n"
            "framework: {options: {cp_partition_mode: contiguous, dynamic_context_parallel: true}}\n")
    llama = load_problem_text(text, source="llama.yaml")
    mapping = Mapping(gpus=64, cp=2, gbs=512, seq_len=8192)
    assert failing(judge(llama, mapping)) == {"contiguous-cp-variants", "dynamic-cp-restrictions"}
    assert failing(judge(llama, Mapping(gpus=64, gbs=512, seq_len=8192))) == {"dynamic-cp-restrictions"}
    unpacked = variant(("packed_sequences: true", "packed_sequences: false"))
    slack, message = judge(unpacked, seed_mapping(cp=4))["contiguous-cp-requires-packing-scheduler"]
    assert slack == -3
    assert "BSHD inputs are not supported" in message


def test_seed_claims_pack_switches_on_and_off() -> None:
    """Seed 000 §先确定模型与实现: 'static CP only' and 'no deterministic mode on the packed path' are
    rules only while the seed-claims pack is on (Megatron dev@d48bd6be enforces neither,
    megatron-groups.md §3)."""
    claims = {"seed-dsv4-static-cp-only", "seed-dsv4-packed-no-deterministic"}
    flags = ("    cp_partition_mode:", "    dynamic_context_parallel: true\n    deterministic_mode: true\n"
                                          "    calculate_per_token_loss: true\n    cp_partition_mode:")
    on = variant(flags, ("rule_packs: [megatron-core, deepseek-v4]", "rule_packs: [megatron-core, deepseek-v4, seed-claims]"))
    verdicts = judge(on, seed_mapping(cp=4))
    assert failing(verdicts) == claims
    assert "was not found to enforce" in verdicts["seed-dsv4-static-cp-only"][1]
    assert verdicts["seed-dsv4-packed-no-deterministic"][0] == -3
    off = variant(flags)
    assert failing(judge(off, seed_mapping(cp=4))) == set()
    assert not any(r.active(off) for r in RULES if r.id in claims)
