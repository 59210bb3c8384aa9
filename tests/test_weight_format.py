"""Weight bytes under FP8 (constraints/physics/weight_format.py), each against a count worked out from the source.

Transformer Engine keeps, for each GEMM weight, the row-wise FP8 data and the column-wise copy the backward reads
(a transpose on TN-only GPUs, TransformerEngine@d0067d0 tensor/storage/float8_tensor_storage.py update_usage;
utils.py:658). Without --fp8-param-gather that FP8 copy is cached beside the BF16 parameter for every microbatch
(module/linear.py:1958-2071, Megatron-LM extensions/transformer_engine.py:1338-1345); with it the FP8 parameter is
all there is (Megatron-LM argument_utils.py:312, param_and_grad_buffer.py:921-923). The run is Llama 3 8B in FP8 on
one H100 node at TP1, as Megatron-LM main@d98e8a64 examples/llama/train_llama3_8b_h100_fp8.sh launches it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction

import pytest
from click.testing import CliRunner

from parasol.constraints.evaluate import evaluate
from parasol.constraints.physics.memory import weights_assumption
from parasol.constraints.physics.weight_format import fp8_copy_bytes, fp8_param_gather_on, weight_format
from parasol.constraints.physics.workload import build_workload, settings_for
from parasol.problems.derived import derive
from parasol.problems.inputs import explain_inputs
from parasol.problems.loader import load_problem_text
from parasol.problems.mapping_input import build_mapping
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Precision, Training
from parasol.solver.cli import main
from parasol.solver.outputs.emit import megatron_args, round_trip

LLAMA3_8B_FP8 = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
                 "--num-query-groups 8 --kv-channels 128 --ffn-hidden-size 14336 --swiglu --disable-bias-linear "
                 "--normalization RMSNorm --untie-embeddings-and-output-weights --padded-vocab-size 128256 "
                 "--position-embedding-type rope --max-position-embeddings 8192 --seq-length 8192 "
                 "--micro-batch-size 1 --global-batch-size 128 --bf16 --grad-reduce-in-bf16 --fp8-format hybrid "
                 "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather")

GEMM_PARAMS = 32 * (4096 * (4096 + 2 * 8 * 128) + 4096 * 4096 + 3 * 4096 * 14336)
"""Llama 3 8B's Transformer Engine GEMM weights: per layer QKV 4096·6144, output 4096², SwiGLU 3·4096·14336."""
OTHER_PARAMS = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
"""Its BF16 weights: untied embedding and output layer, two RMSNorms per layer and the final one."""


def term_bytes(extra: str, hardware: str, *names: str) -> int:
    """The heaviest stage's ledger terms `names`, summed, for the launch line with `extra` flags, on 8 GPUs."""
    ex = explain_inputs(None, (), (f"{LLAMA3_8B_FP8} {extra}", "--megatron-args"), hardware=hardware, gpus=8)
    ledger = evaluate(ex.problem, ex.mapping).facts.ledger
    assert ledger is not None
    return sum(ledger.peak.term(name).bytes for name in names)


def weights_bytes(extra: str, hardware: str = "h100-hgx") -> int:
    """The heaviest stage's weights (dense plus routed) for the launch line with `extra` flags, on 8 GPUs."""
    return term_bytes(extra, hardware, "weights (dense)", "weights (routed experts)")


def test_fp8_parameters_on_hopper_hold_data_and_transpose() -> None:
    """--fp8-param-gather on an H100 (SM 90, TN-only FP8 GEMMs): 1 B data + 1 B transpose per GEMM weight, 2 B per
    other weight: 16.06 GB, as many bytes as BF16 weights."""
    assert weights_bytes("--fp8-param-gather") == 2 * GEMM_PARAMS + 2 * OTHER_PARAMS == 16_060_522_496


def test_fp8_without_fp8_parameters_keeps_the_bf16_weight_and_the_cached_copy() -> None:
    """Megatron's default (no --fp8-param-gather): the BF16 parameter and its cached FP8 copy with transpose,
    4 B per GEMM weight: 13.96 GB more than the FP8 parameters."""
    assert weights_bytes("") == 4 * GEMM_PARAMS + 2 * OTHER_PARAMS
    assert weights_bytes("") - weights_bytes("--fp8-param-gather") == 2 * GEMM_PARAMS == 13_958_643_712


def test_blackwell_keeps_no_transpose_under_per_tensor_scaling() -> None:
    """B200 (SM 100) runs FP8 GEMMs in any layout: 1 B per GEMM weight under delayed scaling, so 6.98 GB less;
    MXFP8 keeps both directions with an E8M0 scale per 32 values whatever the GPU: 2 + 1/16 B."""
    assert weights_bytes("--fp8-param-gather", "b200-hgx") == GEMM_PARAMS + 2 * OTHER_PARAMS
    mx = weights_bytes("--fp8-param-gather --fp8-recipe mxfp8", "b200-hgx")
    assert mx == GEMM_PARAMS * Fraction(33, 16) + 2 * OTHER_PARAMS


MEGATRON_FSDP = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --ckpt-format fsdp_dtensor"


def test_fsdp_shards_the_parameter_not_tes_cached_copy() -> None:
    """Megatron-FSDP shards the parameters over the 8 data-parallel ranks, but TE's cached FP8 copy has the
    unsharded weight's shape and stays (TE leaves caching off only for modules torch FSDP2 wraps, base.py:1036-1047):
    2·(GEMM + other)/8 + 2·GEMM. With FP8 parameters the copy is the parameter, sharded: 2·(GEMM + other)/8. Under
    torch FSDP2 TE caches nothing, so the BF16 parameter alone: 2·(GEMM + other)/8 again."""
    sharded = 2 * (GEMM_PARAMS + OTHER_PARAMS) / 8
    assert weights_bytes(MEGATRON_FSDP) == pytest.approx(sharded + 2 * GEMM_PARAMS, abs=2)
    assert weights_bytes(f"{MEGATRON_FSDP} --fp8-param-gather") == pytest.approx(sharded, abs=2)
    assert weights_bytes("--use-torch-fsdp2 --ckpt-format torch_dist --no-gradient-accumulation-fusion") == \
        pytest.approx(sharded, abs=2)


def test_fsdp_units_gather_fp8_parameters_in_their_format() -> None:
    """The largest unit (one Llama layer: 218,103,808 GEMM weights, two 4,096-wide norms) is held twice (computing
    and prefetched) with its BF16 gradients: 2·(2·GEMM + 2·norms) + 2·(GEMM + norms) in BF16, and on a B200 with
    FP8 parameters under delayed scaling, 1 B per GEMM weight: 2·(GEMM + 2·norms) + 2·(GEMM + norms)."""
    layer, norms = 218_103_808, 2 * 4096
    units = "FSDP unit buffers"
    assert term_bytes(MEGATRON_FSDP, "h100-hgx", units) == 2 * (2 * layer + 2 * norms) + 2 * (layer + norms)
    assert term_bytes(f"{MEGATRON_FSDP} --fp8-param-gather", "b200-hgx", units) == \
        2 * (layer + 2 * norms) + 2 * (layer + norms)


@pytest.mark.parametrize(("recipe", "sm", "expected"), [
    ("delayed", 90, Fraction(2)), ("tensorwise", 90, Fraction(2)), ("delayed", 100, Fraction(1)),
    ("tensorwise", 103, Fraction(1)), ("delayed", 120, Fraction(2)), ("delayed", None, Fraction(2)),
    ("mxfp8", 100, Fraction(2) + Fraction(2, 32)), ("blockwise", 90, Fraction(2) + Fraction(8, 128 * 128)),
])
def test_fp8_copy_bytes_by_recipe_and_gpu(recipe: str, sm: int | None, expected: Fraction) -> None:
    """TE utils.py:658: SM 10.x, 11.x and 13+ take non-TN FP8 GEMMs; an unknown GPU is taken as TN-only."""
    assert fp8_copy_bytes(recipe, sm) == expected


def test_parasols_choice_takes_fp8_parameters_where_megatron_accepts_them() -> None:
    """Unset: on for FP8 with the distributed optimizer or Megatron-FSDP (arguments.py:1095-1097), off without
    them, off under torch FSDP2 (1051-1056) and with a host optimizer unless delayed scaling (1888-1891)."""
    fp8 = Training(seq_len=4096, global_batch=64, precision=Precision.fp8)
    unset = MegatronOptions()
    assert fp8_param_gather_on(fp8, unset)
    assert not fp8_param_gather_on(fp8.model_copy(update={"distributed_optimizer": False}), unset)
    assert fp8_param_gather_on(fp8.model_copy(update={"distributed_optimizer": False, "fsdp": "megatron-fsdp"}), unset)
    assert not fp8_param_gather_on(fp8.model_copy(update={"fsdp": "torch-fsdp2"}), MegatronOptions(fp8_param_gather=True))
    offload = {"optimizer_cpu_offload": True, "use_precision_aware_optimizer": True}
    assert fp8_param_gather_on(fp8, MegatronOptions(**offload))
    assert not fp8_param_gather_on(fp8, MegatronOptions(**offload, fp8_recipe="tensorwise"))
    assert not fp8_param_gather_on(fp8.model_copy(update={"precision": Precision.bf16}), unset)
    assert not fp8_param_gather_on(fp8, MegatronOptions(fp8_param_gather=False))


def test_fp8_parameters_gather_one_byte_except_mxfp8() -> None:
    """The parameter all-gather moves the uint8 buffer (1 B per GEMM weight); MXFP8 gathers BF16 into the gradient
    buffer and quantizes after (param_and_grad_buffer.py:1160-1180); BF16 parameters gather 2 B."""
    fp8 = Training(seq_len=4096, global_batch=64, precision=Precision.fp8)
    assert weight_format(fp8, MegatronOptions(), 90).gather == 1
    assert weight_format(fp8, MegatronOptions(fp8_recipe="mxfp8"), 100).gather == 2
    assert weight_format(fp8, MegatronOptions(fp8_param_gather=False), 90).gather == 2


FP8_PROBLEM = """
name: llama-fp8
model: llama-3.1-8b
training: {seq_len: 8192, global_batch: 128, precision: fp8}
hardware: {preset: h100-hgx, gpus: 16}
mapping: {tp: 2, pp: 1, cp: 1, mbs: 1}
"""


def test_dp_gather_moves_fp8_gemm_weights_and_bf16_others() -> None:
    """With FP8 parameters the dense DP gather carries 1 B per GEMM weight and 2 B per other weight: its seconds
    over the BF16 gather's are (GEMM + 2·other) / (2·(GEMM + other)) on the same link (TP2 halves both)."""
    problem = load_problem_text(FP8_PROBLEM)
    mapping = build_mapping(problem, {})
    derived = derive(problem.model, mapping)
    settings = settings_for(problem)
    assert settings.gemm_gather_bytes == 1.0
    fp8 = build_workload(problem, mapping, derived, settings).stages[0].dp_dense_gather
    bf16 = build_workload(problem, mapping, derived, replace(settings, gemm_gather_bytes=2.0)).stages[0].dp_dense_gather
    gemm, other = GEMM_PARAMS / 2, 2 * 128256 * 4096 / 2  # the DP terms count embedding and head, not norms
    ratio = (gemm + 2 * other) / (2 * (gemm + other))
    assert fp8.nvlink_s / bf16.nvlink_s == pytest.approx(ratio, rel=1e-9)


def test_emitted_line_asks_for_fp8_parameters_and_reads_back_the_same() -> None:
    """An FP8 problem priced with FP8 parameters launches with --fp8-param-gather, so the line Megatron runs holds
    the weights the ledger priced; read back, it judges the same."""
    problem = load_problem_text(FP8_PROBLEM)
    mapping = build_mapping(problem, {})
    assert "--fp8-param-gather" in {f.name for f in megatron_args(problem, mapping).flags}
    assert round_trip(problem, mapping).ok


def test_explain_says_what_fp8_parameters_would_save() -> None:
    """A launch line in FP8 without --fp8-param-gather gets a note with the heaviest stage under both (96.04 GB
    and 82.08 GB: the 13.96 GB of cached copies); with the flag, in BF16, or where Megatron refuses it, none."""
    def notes(line: str) -> list[str]:
        result = CliRunner().invoke(main, ["explain", "--hardware", "h100-hgx", "--gpus", "8", "--megatron-args",
                                           line, "--json"])
        assert result.exit_code in (0, 1), result.output
        return [n for n in json.loads(result.output)["notes"] if n.startswith("--fp8-param-gather")]

    (note,) = notes(LLAMA3_8B_FP8)
    assert "82.08 GB instead of 96.04 GB" in note
    assert notes(LLAMA3_8B_FP8 + " --fp8-param-gather") == []
    assert notes(LLAMA3_8B_FP8.replace(" --fp8-format hybrid", "")) == []
    assert notes(LLAMA3_8B_FP8.replace(" --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather",
                                       "")) == []  # Megatron would refuse the flag there (arguments.py:1095-1097)


def test_the_ledger_says_which_weights_it_holds() -> None:
    """The ledger's first assumption names the format: FP8 parameters, BF16 beside a cached copy, or (torch FSDP2)
    the BF16 parameter alone."""
    fp8 = Training(seq_len=4096, global_batch=64, precision=Precision.fp8)
    said = {name: weights_assumption(weight_format(training, options, 90)) for name, training, options in (
        ("params", fp8, MegatronOptions()), ("cached", fp8, MegatronOptions(fp8_param_gather=False)),
        ("fsdp2", fp8.model_copy(update={"fsdp": "torch-fsdp2"}), MegatronOptions()))}
    assert "are FP8 parameters (--fp8-param-gather), FP8 delayed (row-wise + transpose) 2 B" in said["params"]
    assert "keep the BF16 parameter and the FP8 copy" in said["cached"] and "BF16 2 B + cached FP8" in said["cached"]
    assert said["fsdp2"] == "Weights: BF16 2 B (under torch FSDP2 TE keeps no FP8 copy) per param."


def test_each_fp8_recipe_runs_only_where_transformer_engine_supports_it() -> None:
    """TE's check_recipe_support (quantization.py:149-185): MXFP8 on an H100 (SM 9.0) is refused, on a B200 (10.0)
    it runs; blockwise and per-tensor scaling run on both."""
    def broken(extra: str, hardware: str) -> bool:
        ex = explain_inputs(None, (), (f"{LLAMA3_8B_FP8} {extra}", "--megatron-args"), hardware=hardware, gpus=8)
        return "fp8-recipe-on-gpu" in {v.rule for v in evaluate(ex.problem, ex.mapping).violations}

    assert broken("--fp8-recipe mxfp8 --fp8-param-gather", "h100-hgx")
    assert not broken("--fp8-recipe mxfp8 --fp8-param-gather", "b200-hgx")
    assert not any(broken(f"--fp8-recipe {r} --fp8-param-gather", hw) for r in ("blockwise", "tensorwise", "delayed")
                   for hw in ("h100-hgx", "b200-hgx"))
