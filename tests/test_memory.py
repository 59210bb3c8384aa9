"""The per-stage memory ledger: each term against a hand computation from its stated formula.

Sources: seed 000 §显存先按最重的 rank 算 (M_peak terms; 8 MoE layers of EP64 routed weights = 6.34 GB),
Megatron-LM schedules.py (1F1B warm-up PP − s; interleaved (PP − s − 1)·2 + (v − 1)·PP), and
megatron-groups.md §1.3 (dense gradients reduced over dp-cp, expert gradients over expert DP).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parasol.constraints.evaluate import facts_for
from parasol.constraints.physics.activations import ActivationContext, block_bytes_per_token
from parasol.constraints.physics.memory import inflight_microbatches, memory_ledger, stage_block_ranges
from parasol.problems.derived import derive
from parasol.problems.loader import load_problem
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import expert_params

PROBLEM_1024 = "problems/deepseek-v4-pro-1024.yaml"


@pytest.fixture(scope="module")
def v4_1024():
    return load_problem(PROBLEM_1024)


def seed_a(**kw) -> Mapping:
    """Seed 000's configuration A on 1,024 GPUs."""
    base = dict(gpus=1024, tp=1, pp=8, cp=1, ep=64, etp=1, mbs=1, gbs=4096, seq_len=8192)
    return Mapping(**{**base, **kw})


def test_stage_with_eight_moe_blocks_holds_6_34_gb_of_routed_weights(v4_1024) -> None:
    """Seed 000: 8 MoE layers × 6 experts × 66,060,288 × 2 B = 6.34 GB (EP64)."""
    ledger = facts_for(v4_1024, seed_a(layout=(7, 8, 8, 8, 8, 8, 7, 7))).ledger
    stage1 = ledger.stages[1]
    assert stage1.moe_blocks == 8
    assert round(stage1.term("weights (routed experts)").gb, 2) == 6.34
    assert stage1.expert_params == 8 * 6 * expert_params(v4_1024.model)


def test_optimizer_state_is_sharded_over_expert_dp_and_dense_dp_cp(v4_1024) -> None:
    """Muon (8 B on matrices) over D_e = 2 for experts; Adam/Muon over D_a·CP for dense params."""
    f = facts_for(v4_1024, seed_a(layout=(7, 8, 8, 8, 8, 8, 7, 7)))
    s = f.ledger.stages[1]
    expert_part = s.expert_params * 8 / 2
    assert s.term("optimizer state").bytes == pytest.approx(expert_part + s.dense_params * 8 / 128, rel=1e-3)


def test_gradient_buffer_is_fp32_for_every_local_parameter(v4_1024) -> None:
    """Megatron DDP keeps an FP32 main-grad buffer of every local parameter (not sharded)."""
    s = facts_for(v4_1024, seed_a(layout=(7, 8, 8, 8, 8, 8, 7, 7))).ledger.stages[3]
    assert s.term("gradients").bytes == pytest.approx((s.dense_params + s.expert_params) * 4)


@pytest.mark.parametrize(("stage", "vpp", "m", "expected"), [
    (0, 1, 32, 8), (7, 1, 32, 1), (0, 1, 4, 4), (3, 1, 32, 5),
    (0, 2, 32, (7 * 2 + 8 + 1) / 2), (7, 2, 32, (0 + 8 + 1) / 2), (0, 2, 4, 4),
])
def test_microbatches_in_flight(stage: int, vpp: int, m: int, expected: float) -> None:
    """1F1B holds min(PP − s, m); interleaved holds ((PP − s − 1)·2 + (v − 1)·PP + 1)/v layer sets."""
    assert inflight_microbatches(stage, 8, vpp, m) == expected


def test_virtual_stages_go_round_robin() -> None:
    """Virtual stage k runs on pipeline rank k % PP (Megatron layout rule)."""
    assert stage_block_ranges((2, 2, 1, 1), 2) == [[0, 1, 4], [2, 3, 5]]


def test_gqa_dense_block_activation_per_token() -> None:
    """Llama 3.1 8B block, TP1, no recompute: norm input 2h + qkv input 2h + q,k,v 2(32+16)·128 +
    output 2·4096 + LSE 4·32; MLP: 2h + 2h + fc1 2·2f + act 2f (f = 14336)."""
    model = load_model("llama-3.1-8b")
    ctx = ActivationContext(tp=1, etp=1, sequence_parallel=True, recompute=Recompute.none, modules=frozenset())
    h, f = 4096, 14336
    attention = 2 * h + 2 * h + 2 * (32 + 16) * 128 + 2 * 4096 + 4 * 32
    mlp = 2 * h + 2 * h + 2 * 2 * f + 2 * f
    assert block_bytes_per_token(model, model.blocks[0], ctx) == attention + mlp


def test_fp8_keeps_linear_inputs_in_one_byte() -> None:
    """Under an FP8 recipe Transformer Engine saves each linear layer's input quantized, 1 B per element
    (TransformerEngine pytorch/module/linear.py `_Linear.forward`: row-wise data discarded, column-wise
    FP8 data saved for the weight gradient). Llama 3.1 8B block, TP1: the qkv, fc1 and fc2 inputs
    (h, h, f) drop to 1 B; norm inputs, q/k/v, LSE, the SwiGLU input and the attention output (kept in
    BF16 by the attention kernel, which the projection shares: Megatron-LM attention.py:428-444) stay."""
    model = load_model("llama-3.1-8b")
    bf16 = ActivationContext(tp=1, etp=1, sequence_parallel=True, recompute=Recompute.none, modules=frozenset())
    fp8 = replace(bf16, gemm_input_bytes=1)
    h, f = 4096, 14336
    saved = h + h + f
    assert block_bytes_per_token(model, model.blocks[0], bf16) - block_bytes_per_token(model, model.blocks[0], fp8) \
        == saved


def test_fp8_delayed_scaling_adds_the_projection_copy() -> None:
    """Under FP8 delayed scaling (Megatron's default recipe) the output projection keeps its own FP8 copy
    of the attention output beside the kernel's BF16 one (attention.py:428-444 only shares it for the
    other recipes): +1 B × 32·128 per token on a Llama 3.1 8B block."""
    model, block = load_model("llama-3.1-8b"), load_model("llama-3.1-8b").blocks[0]
    blockwise = ActivationContext(tp=1, etp=1, sequence_parallel=True, recompute=Recompute.none,
                                  modules=frozenset(), gemm_input_bytes=1)
    delayed = replace(blockwise, attn_out_bytes=3)
    assert block_bytes_per_token(model, block, delayed) - block_bytes_per_token(model, block, blockwise) == 32 * 128


def test_full_recompute_keeps_only_block_inputs(v4_1024) -> None:
    """Full recompute: per block only its input (hc_mult·h·2 B per token) plus one block's working set."""
    f = facts_for(v4_1024, seed_a(recompute=Recompute.full, layout=(7, 8, 8, 8, 8, 8, 7, 7)))
    s = f.ledger.stages[3]
    per_mb = 8 * 4 * 7168 * 2 * 8192
    assert s.term("activations").bytes == pytest.approx(per_mb * 5)
    assert s.term("recompute working set").bytes > 0


def test_every_stage_reports_usable_hbm_and_slack(v4_1024) -> None:
    """Slack = usable HBM − total, per stage; the heaviest stage is the ledger's peak."""
    ledger = facts_for(v4_1024, seed_a()).ledger
    usable = v4_1024.hardware.gpu.usable_hbm_bytes
    for s in ledger.stages:
        assert s.slack_gb == pytest.approx((usable - s.total_bytes) / 1e9)
    assert ledger.peak.total_bytes == max(s.total_bytes for s in ledger.stages)


def test_routed_expert_rows_follow_the_sequence_parallel_split() -> None:
    """Mixtral 8x22B MoE sublayer at TP2 ETP2 with SP: the layer sees b·S/(CP·TP) tokens, each sends
    k = 2 rows that the ETP group all-gathers, so 2·2/2 = 2 rows per token of b·S/CP, each holding the
    permuted input h, fc1 2·f/ETP, act f/ETP and its FP32 routing weight (token_dispatcher.py:728-751;
    not the fc2 output: the weight is applied in the activation, experts.py:943-1017)."""
    model = load_model("mixtral-8x22b")
    h, f, e = 6144, 16384, 8
    ctx = ActivationContext(tp=2, etp=2, sequence_parallel=True, recompute=Recompute.none, modules=frozenset())
    moe = 2 * h / 2 + 2 * h / 2 + 4 * e / 2 + (2 * 2 / 2) * (2 * h + 2 * 2 * f / 2 + 2 * f / 2 + 4)
    attention = 2 * h / 2 + 2 * h / 2 + 2 * (48 / 2 + 2 * 8 / 2) * 128 + 2 * 48 * 128 / 2 + 4 * 48 / 2
    assert block_bytes_per_token(model, model.blocks[0], ctx) == pytest.approx(attention + moe)


def test_fsdp_shards_weights_and_gradients_over_data_parallelism() -> None:
    """ZeRO-3 (Megatron-FSDP optim_grads_params): Llama 3.1 8B on 64 GPUs TP1 PP1 holds 1/64 of its
    weights and gradients, plus the FSDP unit buffers of its largest block (2 × weights + gradients)."""
    from parasol.problems.loader import load_problem_text
    text = """
model: llama-3.1-8b
training: {seq_len: 8192, global_batch: 512, fsdp: %s, grad_dtype: bf16}
hardware: {preset: h100-hgx, gpus: 64}
"""
    mapping = Mapping(gpus=64, tp=1, pp=1, mbs=1, gbs=512, seq_len=8192)
    ddp = facts_for(load_problem_text(text % "none", source="a.yaml"), mapping).ledger.peak
    fsdp = facts_for(load_problem_text(text % "megatron-fsdp", source="b.yaml"), mapping).ledger.peak
    for term in ("weights (dense)", "gradients"):
        assert fsdp.term(term).bytes == pytest.approx(ddp.term(term).bytes / 64, rel=1e-6, abs=2)
    assert fsdp.term("optimizer state").bytes == ddp.term("optimizer state").bytes
    assert fsdp.term("FSDP unit buffers").bytes > 0 and ddp.term("FSDP unit buffers").bytes == 0


def test_offloading_moves_optimizer_state_and_module_inputs_to_the_host() -> None:
    """--optimizer-cpu-offload --optimizer-offload-fraction 0.75 keeps a quarter of the optimizer state;
    offloading core_attn's input drops q, k, v (arguments.py:2918-2922, transformer_config.py:1328-1341)."""
    from parasol.problems.options import MegatronOptions
    from parasol.problems.schema import Training
    model = load_model("llama-3.1-8b")
    mapping = Mapping(gpus=8, tp=1, pp=1, mbs=1, gbs=64, seq_len=4096)
    d = derive(model, mapping)
    training = Training(seq_len=4096, global_batch=64)
    plain = memory_ledger(model, mapping, d, training, 80e9).peak
    options = MegatronOptions(optimizer_cpu_offload=True, optimizer_offload_fraction=0.75,
                              offload_modules=("core_attn",))
    moved = memory_ledger(model, mapping, d, training, 80e9, options).peak
    assert moved.term("optimizer state").bytes == pytest.approx(plain.term("optimizer state").bytes / 4, abs=2)
    qkv = 2 * (32 + 2 * 8) * 128 * 4096 * 32
    assert plain.term("activations").bytes - moved.term("activations").bytes == pytest.approx(qkv, rel=1e-9)


DUALPIPE_PROBLEM = """
model: llama-3.1-8b
training: {seq_len: 4096, global_batch: 64, pipeline_schedule: %s}
hardware: {preset: h100-hgx, gpus: 8}
"""


def test_dualpipe_holds_two_stages_and_pp_plus_one_stage_microbatches() -> None:
    """DualPipe on PP 4: rank s holds stage s and its mirror 3 − s (2× parameters) and PP+1 = 5
    stage-microbatches of activations, i.e. 5/2 of its two-stage set (deepseek-ai/DualPipe README;
    DeepSeek-V3 report Table 2); rank 0 runs embedding and head."""
    from parasol.problems.loader import load_problem_text
    from parasol.problems.mapping_input import build_mapping
    plain = load_problem_text(DUALPIPE_PROBLEM % "megatron", source="a.yaml")
    dual = load_problem_text(DUALPIPE_PROBLEM % "dualpipe", source="b.yaml")
    sets = {"pp": "4", "tp": "2"}
    one = facts_for(plain, build_mapping(plain, sets)).ledger.stages
    two = facts_for(dual, build_mapping(dual, sets)).ledger.stages
    assert two[1].blocks == one[1].blocks + one[2].blocks and two[0].inflight_microbatches == 2.5
    assert two[1].term("weights (dense)").bytes == one[1].term("weights (dense)").bytes + one[2].term("weights (dense)").bytes
    assert two[0].term("weights (dense)").bytes == one[0].term("weights (dense)").bytes + one[3].term("weights (dense)").bytes


def test_dualpipe_requirements_are_rules() -> None:
    """DualPipe needs an even PP and an even m >= 2·PP (dualpipe/dualpipe.py:332-333): the mapping builds and
    the parasol rules dualpipe-even-pp and dualpipe-microbatches say what is wrong (not an input error)."""
    from parasol.constraints.evaluate import evaluate
    from parasol.problems.loader import load_problem_text
    from parasol.problems.mapping_input import build_mapping
    dual = load_problem_text(DUALPIPE_PROBLEM % "dualpipe", source="b.yaml")
    broken = lambda sets: {v.rule for v in evaluate(dual, build_mapping(dual, sets)).verdicts  # noqa: E731
                           if not v.holds}
    assert "dualpipe-even-pp" in broken({"pp": "1"})
    assert "dualpipe-microbatches" in broken({"pp": "8", "gbs": "8"})
    assert not {"dualpipe-even-pp", "dualpipe-microbatches"} & broken({"pp": "2", "gbs": "64"})


