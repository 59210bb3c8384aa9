"""Issue 16 item 8: sliding-window (local/global) attention, Mamba-2 and gated DeltaNet mixers, Megatron
hybrid layer patterns, LatentMoE and parallel attention+MLP blocks, each checked against a public number.

Sources: Mistral 7B (arXiv 2310.06825, Table 1 and §2); the Nemotron-H report (arXiv 2504.03624, Table 1);
the Nemotron 3 Nano report (arXiv 2512.20848); Megatron-LM main@d98e8a64 (training.py:840-1005 FLOP counter,
mamba_mixer.py, gated_delta_net/common.py, utils.py:531-545, hybrid_layer_allocation.py:14-25,
examples/post_training/modelopt/conf/nvidia/*.sh launch files)."""

from __future__ import annotations

import pytest

from parasol.constraints.physics.activations import ActivationContext, block_bytes_per_token
from parasol.constraints.physics.exchanges import tp_regions
from parasol.constraints.physics.flops import (
    block_flops,
    mean_window_keys,
    model_flops_per_token,
)
from parasol.errors import InputError
from parasol.problems.mapping import Recompute
from parasol.problems.model.architecture import BlockKind, Mixer, architecture_from_dict
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import block_params, gdn_params, mamba_params, model_params

NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"


def test_mistral_7b_parameters_and_window() -> None:
    """Mistral 7B (Table 1): 32 layers of dim 4096, 32 heads / 8 KV heads of 128, hidden 14336, vocab 32000:
    7,241,732,096 weights (the checkpoint count; the paper's "7B"/7.3B), every layer local with W = 4096."""
    model = load_model("mistral-7b")
    assert model_params(model).total == 7_241_732_096
    assert {b.window for b in model.blocks} == {4096}


def test_window_keys_match_the_sliding_window_definition() -> None:
    """Mistral 7B §2: position p attends to min(p, W) positions; the mean over S = 8192 with W = 4096 is
    W − W(W−1)/(2S) = 3072.25, and at S = W it is the causal (S+1)/2."""
    assert mean_window_keys(8192, 4096) == pytest.approx(sum(min(p, 4096) for p in range(1, 8193)) / 8192)
    assert mean_window_keys(8192, 4096) == pytest.approx(3072.25)
    assert mean_window_keys(4096, 4096) == pytest.approx(4097 / 2)


def test_local_global_schedule_follows_megatron() -> None:
    """utils.py:531-545: with window_attn_skip_freq N, 1-based layer n is local unless n % N == 0 (gpt-oss
    alternates local and global from its first layer, layer_types in its config.json)."""
    oss = load_model("gpt-oss-120b")
    assert [b.window for b in oss.blocks[:4]] == [128, None, 128, None]
    listed = architecture_from_dict({**oss.model_dump(mode="json"), "attention": {
        **oss.attention.model_dump(mode="json"), "window_skip_freq": [0, 1] * 18}})
    assert [b.window for b in listed.blocks[:4]] == [None, 128, None, 128]


def test_windowed_attention_costs_less_than_global() -> None:
    """gpt-oss at S = 8192: a local block's core attention is 4·H·d·mean keys with W = 128."""
    oss = load_model("gpt-oss-120b")
    local, full = (block_flops(oss, b, 8192).attention_core for b in oss.blocks[:2])
    assert local == pytest.approx(4 * 64 * 64 * mean_window_keys(8192, 128))
    assert full == pytest.approx(4 * 64 * 64 * 8193 / 2)


def test_nemotron_h_8b_layers_and_parameters() -> None:
    """Nemotron-H report Table 1: 52 layers = 24 Mamba-2 + 4 attention + 24 FFN; the model is "8B"
    (8,100,852,736 weights from the Megatron launch file's shapes)."""
    model = load_model("nemotron-h-8b")
    mixers = [b.mixer for b in model.blocks]
    assert (mixers.count(Mixer.mamba), mixers.count(Mixer.attention)) == (24, 4)
    assert sum(b.mlp is BlockKind.dense for b in model.blocks) == 24
    assert model_params(model).total == 8_100_852_736
    assert model_params(model).total / 8e9 - 1 < 0.02


def test_nemotron_3_nano_counts_match_its_report() -> None:
    """Nemotron 3 Nano report: 31.6B total, 3.2B active, 3.6B active with embeddings; 23 Mamba-2, 23 MoE
    and 6 attention layers."""
    model = load_model("nemotron-3-nano-30b-a3b")
    params = model_params(model)
    assert round(params.total / 1e9, 1) == 31.6
    assert round(params.active_with_embedding / 1e9, 1) == 3.6
    assert round(params.active_head_only / 1e9, 1) == 3.2
    assert model.layer_pattern == NANO_PATTERN and model.layer_pattern.count("M") == 23


@pytest.mark.parametrize(("name", "total", "active"), [
    ("nemotron-3-super-120b-a12b", 120, 12), ("nemotron-3-ultra-550b-a55b", 550, 55)])
def test_latent_moe_models_match_their_names(name: str, total: int, active: int) -> None:
    """NVIDIA-Nemotron-3-Super-120B-A12B / -Ultra-550B-A55B: totals and actives within 7% of the names."""
    params = model_params(load_model(name))
    assert params.total / (total * 1e9) == pytest.approx(1, abs=0.01)
    assert params.active_with_embedding / (active * 1e9) == pytest.approx(1, abs=0.07)


def test_mamba_layer_flops_match_megatrons_counter() -> None:
    """training.py:885-903 for Nemotron-H-8B (d_in = 2h = 8192 = 128·64, G 8, N 128): forward per token
    2h(2·d_in + 2GN + H) + 7·d_in·N + 2·d_in·h; parasol adds the conv (2·k per channel) and the per-head and
    norm weights, 0.05% more."""
    model = load_model("nemotron-h-8b")
    h, d_in, g, n, heads = 4096, 8192, 8, 128, 128
    megatron = 2 * h * (2 * d_in + 2 * g * n + heads) + 7 * d_in * n + 2 * d_in * h
    block = model.blocks[0]
    ours = block_flops(model, block, 8192).total
    norm_and_conv = 2 * (h + (d_in + 2 * g * n) * 5 + 3 * heads + d_in)
    assert ours == pytest.approx(megatron + norm_and_conv)
    assert block_flops(model, block, 8192).scan == 7 * d_in * n


def test_mamba_and_gdn_parameter_shapes() -> None:
    """mamba_mixer.py:281-460 and gated_delta_net/common.py:181-290, hand-counted for small shapes."""
    from parasol.problems.model.architecture import GatedDeltaNet, MambaMixer
    mamba = MambaMixer(num_heads=4, head_dim=8, state_size=16, num_groups=2, conv_kernel=4)
    # in_proj 64·(2·32 + 2·2·16 + 4), conv (32 + 64)·(4 + 1), dt/A/D 3·4, norm 32, out_proj 32·64
    assert mamba_params(64, mamba) == 64 * 132 + 96 * 5 + 12 + 32 + 32 * 64
    gdn = GatedDeltaNet(num_key_heads=2, num_value_heads=4, key_head_dim=8, value_head_dim=8, conv_kernel=4)
    # in_proj 64·(2·16 + 2·32 + 2·4), conv (2·16 + 32)·4, dt/A 2·4, norm 8, out_proj 32·64
    assert gdn_params(64, gdn) == 64 * 104 + 64 * 4 + 8 + 8 + 32 * 64


def test_gdn_core_matches_megatrons_counter() -> None:
    """training.py:938-962: the gated delta rule is 2·4·H_v·d_v² per token with d_k = d_v (Qwen3-Next's
    16 key heads, 32 value heads of 128)."""
    model = architecture_from_dict({
        "name": "gdn", "hidden_size": 2048, "vocab_size": 1000, "num_layers": 4,
        "attention": {"kind": "gqa", "num_heads": 16, "num_kv_heads": 2, "head_dim": 256},
        "linear_attention": {"num_key_heads": 16, "num_value_heads": 32}, "linear_attention_freq": 4,
        "dense_mlp": {"intermediate_size": 512}})
    assert [b.mixer for b in model.blocks] == [Mixer.gdn] * 3 + [Mixer.attention]
    assert block_flops(model, model.blocks[0], 4096).scan == 2 * 4 * 32 * 128 * 128
    assert block_flops(model, model.blocks[0], 4096).attention_core == 0


def test_hybrid_layers_have_one_norm_and_one_tp_region() -> None:
    """A hybrid layer is one pre-normed sublayer (mamba_layer.py:98-101): one norm of h weights, one TP
    region; an E layer without shared experts has none."""
    model = load_model("nemotron-3-nano-30b-a3b")
    m_block, e_block = model.blocks[0], model.blocks[1]
    assert block_params(model, m_block).norms == model.hidden_size
    assert tp_regions(model, m_block) == 1 and tp_regions(model, e_block) == 1
    assert block_params(model, e_block).attention == 0


def test_parallel_attention_mlp_shares_its_norm_and_reduction() -> None:
    """GPT-J/PaLM blocks: attention and MLP read one normed input and one reduction sums their outputs."""
    base = load_model("llama-3-8b").model_dump(mode="json")
    serial, parallel = (architecture_from_dict({**base, "parallel_attention_mlp": p}) for p in (False, True))
    h = base["hidden_size"]
    assert model_params(serial).total - model_params(parallel).total == 32 * h
    assert tp_regions(serial, serial.blocks[0]) == 2 and tp_regions(parallel, parallel.blocks[0]) == 1
    ctx = ActivationContext(tp=1, etp=1, sequence_parallel=False, recompute=Recompute.none, modules=frozenset())
    saved = block_bytes_per_token(serial, serial.blocks[0], ctx) - block_bytes_per_token(parallel, parallel.blocks[0], ctx)
    assert saved == 2 * h


def test_mamba_activations_follow_the_fused_kernel() -> None:
    """Per token a Mamba-2 layer keeps its norm and in_proj inputs (h each, /TP under SP), the in_proj output
    the fused conv+scan saves (2·d_inner + 2·G·N + H) and the gated norm's input and output (d_inner each);
    the conv output and chunk states are recomputed (mamba_ssm MambaSplitConv1dScanCombinedFn)."""
    model = load_model("nemotron-3-nano-30b-a3b")
    ctx1, ctx2 = (ActivationContext(tp=t, etp=1, sequence_parallel=True, recompute=Recompute.none,
                                    modules=frozenset()) for t in (1, 2))
    one, two = (block_bytes_per_token(model, model.blocks[0], c) for c in (ctx1, ctx2))
    assert one == 2 * (2 * 2688 + (2 * 4096 + 2 * 8 * 128 + 64) + 2 * 4096)
    assert two == pytest.approx(one / 2)


def test_model_flops_of_nano_are_close_to_its_published_active_count() -> None:
    """6 × 3.2B non-embedding-active + head and the 6 attention layers at S = 8192: 20.8 GFLOP/token."""
    model = load_model("nemotron-3-nano-30b-a3b")
    assert model_flops_per_token(model, 8192) / 1e9 == pytest.approx(20.83, abs=0.01)


@pytest.mark.parametrize(("change", "field"), [
    ({"layer_pattern": "MEX"}, "layer_pattern"),
    ({"layer_pattern": "ME"}, "layer_pattern"),
    ({"mamba": None}, "layer_pattern"),
    ({"linear_attention_freq": 4}, "linear_attention_freq"),
])
def test_bad_shapes_are_input_errors(change: dict, field: str) -> None:
    """A pattern with unknown symbols, the wrong length or a missing section is an InputError naming it."""
    base = load_model("nemotron-3-nano-30b-a3b").model_dump(mode="json")
    with pytest.raises(InputError) as info:
        architecture_from_dict({**base, **change})
    assert field in str(info.value) or "model" in str(info.value)


def test_window_needs_a_window() -> None:
    with pytest.raises(InputError):
        architecture_from_dict({"name": "x", "hidden_size": 64, "vocab_size": 10, "num_layers": 2,
                                "attention": {"kind": "gqa", "num_heads": 4, "num_kv_heads": 4, "head_dim": 16,
                                              "window_skip_freq": 2},
                                "dense_mlp": {"intermediate_size": 128}})


def test_latent_moe_dispatches_latent_rows() -> None:
    """moe_layer.py:265-303,488-491: LatentMoE projects to the latent size before the dispatch, so each
    squared-ReLU expert of Super is 2·ℓ·f = 2·1024·2688, and the replicated bucket holds the gate, its bias
    and the two h·ℓ projections."""
    model = load_model("nemotron-3-super-120b-a12b")
    bp = block_params(model, model.blocks[1])
    assert bp.per_expert == 2 * 1024 * 2688
    assert bp.router == 512 * 4096 + 512 + 2 * 4096 * 1024


NEMOTRON_H_LAUNCH = (
    "--disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope "
    "--normalization RMSNorm --squared-relu --hidden-size 4096 --ffn-hidden-size 21504 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 "
    "--hybrid-layer-pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- --mamba-head-dim 64 "
    "--mamba-num-heads 128 --mamba-num-groups 8 --mamba-state-dim 128 --seq-length 4096 "
    "--max-position-embeddings 8192 --padded-vocab-size 131072")


def test_megatron_launch_of_nemotron_h_builds_the_catalog_model() -> None:
    """The model flags of Megatron-LM's Nemotron-H-8B-Base-8K.sh give the catalog entry's 52 layers and
    8,100,852,736 weights (the pattern counts one layer per symbol, arguments.py:786-797)."""
    from parasol.problems.megatron.launch import parse_launch
    model = parse_launch(NEMOTRON_H_LAUNCH).model
    assert model is not None and model.num_layers == 52
    assert model.layer_pattern == load_model("nemotron-h-8b").layer_pattern
    assert model_params(model).total == model_params(load_model("nemotron-h-8b")).total


def test_megatron_window_and_linear_attention_flags() -> None:
    """--window-size 4095,0 is a 4096-key window (transformer_config.py:247-249); --window-attn-skip-freq 2
    makes even layers global; --experimental-attention-variant gated_delta_net with --linear-attention-freq 4
    makes every 4th layer softmax attention (experimental_attention_variant_module_specs.py:459-476)."""
    from parasol.problems.megatron.launch import parse_launch
    line = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --group-query-attention "
            "--num-query-groups 2 --kv-channels 256 --swiglu --ffn-hidden-size 5120 --position-embedding-type rope "
            "--padded-vocab-size 151936 --max-position-embeddings 4096 --window-size 4095,0 "
            "--window-attn-skip-freq 2 --experimental-attention-variant gated_delta_net --linear-attention-freq 4")
    model = parse_launch(line).model
    assert model is not None
    assert [b.mixer for b in model.blocks].count(Mixer.gdn) == 6
    assert model.attention.sliding_window == 4096 and model.blocks[3].window is None


def test_the_earlier_linear_attention_flag_is_read_and_noted() -> None:
    """--linear-attention-type, the earlier name of --experimental-attention-variant that main's parser no longer
    takes (dev@d48bd6be transformer_config.py:1555-1561 reads it as a deprecated alias; Megatron-MoE-ModelZoo's
    Qwen3-Next config carries it), was "Megatron-LM would stop at unrecognized arguments", exit 2. It is read as
    the variant it names, with a note that Megatron-LM main stops at it."""
    from parasol.problems.megatron.launch import parse_launch
    base = ("--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --group-query-attention "
            "--num-query-groups 2 --kv-channels 256 --swiglu --ffn-hidden-size 5120 --position-embedding-type rope "
            "--padded-vocab-size 151936 --max-position-embeddings 4096 --linear-attention-freq 4 ")
    older = parse_launch(base + "--linear-attention-type gated_delta_net")
    current = parse_launch(base + "--experimental-attention-variant gated_delta_net")
    assert older.model == current.model and [b.mixer for b in older.model.blocks].count(Mixer.gdn) == 6
    assert [n for n in older.notes if n.startswith("--linear-attention-type gated_delta_net: Megatron-LM main does "
                                                   "not take this earlier flag")]


def test_nemotron_h_pipeline_emits_a_hybrid_pattern_that_reads_back() -> None:
    """A PP 2 cut of Nemotron-H-8B is carried by --hybrid-layer-pattern with '|' (arguments.py:799-862) and
    `explain --megatron-args` gives the same mapping back."""
    from parasol.problems.loader import load_problem_text
    from parasol.problems.mapping_input import build_mapping
    from parasol.solver.outputs.emit import megatron_args, round_trip
    problem = load_problem_text(
        "name: nh\nmodel: nemotron-h-8b\ntraining: {seq_len: 4096, global_batch: 256, precision: bf16}\n"
        "hardware: {preset: h100-hgx, gpus: 16}\n", source="nh.yaml")
    mapping = build_mapping(problem, {"tp": "2", "pp": "2", "layout": "30,22"})
    flags = dict(megatron_args(problem, mapping).pairs())
    pattern = flags["--hybrid-layer-pattern"]
    assert pattern.split("|")[0] == problem.model.layer_pattern[:30]
    trip = round_trip(problem, mapping)
    assert trip.ok, (trip.differences, trip.violations)


def _write_config(tmp_path, name: str, config: dict):  # noqa: ANN001, ANN202 - pytest tmp_path
    import json
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def test_hf_nemotron_h_config_builds_nano(tmp_path) -> None:  # noqa: ANN001 - pytest tmp_path
    """A `nemotron_h` config.json with Nemotron 3 Nano's values (its launch file's shapes) gives the catalog
    entry's 31,577,940,288 weights."""
    from parasol.problems.model.hf_config import architecture_from_hf_config
    path = _write_config(tmp_path, "nano", {
        "model_type": "nemotron_h", "hidden_size": 2688, "num_hidden_layers": 52, "vocab_size": 131072,
        "hybrid_override_pattern": NANO_PATTERN, "num_attention_heads": 32, "num_key_value_heads": 2,
        "head_dim": 128, "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "conv_kernel": 4, "mlp_hidden_act": "relu2", "n_routed_experts": 128, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "tie_word_embeddings": False})
    model = architecture_from_hf_config(path)
    assert model_params(model).total == model_params(load_model("nemotron-3-nano-30b-a3b")).total


def test_hf_mistral_and_layer_types(tmp_path) -> None:  # noqa: ANN001 - pytest tmp_path
    """mistralai/Mistral-7B-v0.1 config.json: sliding_window 4096 on every layer; a `layer_types` list makes
    only the sliding_attention layers local."""
    from parasol.problems.model.hf_config import architecture_from_hf_config
    base = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu",
            "sliding_window": 4096, "max_position_embeddings": 32768, "tie_word_embeddings": False}
    model = architecture_from_hf_config(_write_config(tmp_path, "mistral", base))
    assert model_params(model).total == 7_241_732_096 and model.blocks[31].window == 4096
    mixed = {**base, "layer_types": ["sliding_attention", "full_attention"] * 16}
    model = architecture_from_hf_config(_write_config(tmp_path, "mixed", mixed))
    assert [b.window for b in model.blocks[:2]] == [4096, None]


def test_hf_qwen3_next_config(tmp_path) -> None:  # noqa: ANN001 - pytest tmp_path
    """Qwen/Qwen3-Next-80B-A3B config.json (48 layers, full attention every 4th, gated DeltaNet 16/32 heads of
    128, gated GQA 16/2 of 256, 512 experts top-10 of 512 plus a shared 512): "80B total" (model card); the
    shared expert's sigmoid gate holds h = 2,048 weights a layer (Megatron shared_experts.py:136-143)."""
    from parasol.problems.model.hf_config import architecture_from_hf_config
    path = _write_config(tmp_path, "qwen3-next", {
        "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936, "hidden_act": "silu",
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
        "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512})
    model = architecture_from_hf_config(path)
    assert [b.mixer for b in model.blocks[:4]] == [Mixer.gdn] * 3 + [Mixer.attention]
    assert round(model_params(model).total / 1e9) == 80
    assert model.attention.output_gate and model.moe.shared_expert_gate
    ungated = type(model).model_validate({**model.model_dump(), "moe": {**model.moe.model_dump(), "shared_expert_gate": False}})
    assert model_params(model).total - model_params(ungated).total == 48 * 2048


def test_hybrid_layers_are_distinct_block_kinds() -> None:
    """Memory and the solver price one block per kind: Nano's M, E and * layers are three kinds, and
    gpt-oss's local and global layers two."""
    from parasol.constraints.physics.memory import block_kind
    nano, oss = load_model("nemotron-3-nano-30b-a3b"), load_model("gpt-oss-120b")
    assert len({block_kind(b) for b in nano.blocks}) == 3
    assert len({block_kind(b) for b in oss.blocks}) == 2


def test_mamba_heads_and_groups_split_over_tp() -> None:
    """mamba_mixer.py:262,270: Mamba-2 heads and groups divide by TP; Nano's 8 groups refuse TP 16 (its
    32 attention heads would allow it) and take TP 8 (rule tp-sharded-linear-dims)."""
    from parasol.constraints.evaluate import facts_for
    from parasol.constraints.rules.divisibility import TPShardedLinearDims
    from parasol.problems.loader import load_problem_text
    from parasol.problems.mapping_input import build_mapping
    problem = load_problem_text(
        "name: n\nmodel: nemotron-3-nano-30b-a3b\ntraining: {seq_len: 8192, global_batch: 64, precision: bf16}\n"
        "hardware: {preset: h100-hgx, gpus: 16}\n", source="n.yaml")
    rule = TPShardedLinearDims()
    wide, fits = (facts_for(problem, build_mapping(problem, {"tp": tp, "ep": "1"})) for tp in ("16", "8"))
    assert rule.slack(wide) < 0 and "Mamba-2 groups 8" in rule.message(wide)
    assert rule.slack(fits) >= 0
