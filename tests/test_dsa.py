"""DeepSeek sparse attention (DSA, DeepSeek-V3.2): MLA with a lightning indexer, read from a HuggingFace
`deepseek_v32` config.json and from Megatron-LM's --experimental-attention-variant dsa flags; its indexer's weights
(dsa.py:1159-1203, duplicated on every TP rank) and its two Megatron rules (transformer_config.py:1510-1516,
3162-3175). Shapes: DeepSeek-V3.2-Exp's config.json is DeepSeek-V3's with index_n_heads 64, index_head_dim 128 and
index_topk 2048 (the DeepseekV32Config defaults)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from parasol.errors import InputError
from parasol.problems.inputs import explain_inputs
from parasol.problems.model.architecture import DSAIndexer, MLAAttention
from parasol.problems.model.catalog import load_model
from parasol.problems.model.hf_config import architecture_from_hf_config
from parasol.problems.model.params import block_params, dsa_indexer_params, model_params
from parasol.solver.diagnose.explain import explain

V32_INDEXER = DSAIndexer(n_heads=64, head_dim=128, topk=2048)
V3_TOTAL = 671_026_419_200
"""DeepSeek-V3's main-model parameters (problems/catalog/deepseek-v3.yaml)."""
PER_LAYER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
"""One V3.2 indexer: wq_b from the 1,536-wide q latent to 64 heads of 128, wk 7,168 → 128, its LayerNorm's weight and
bias, weights_proj 7,168 → 64 (dsa.py:1159-1203)."""
LINE = ("--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --multi-latent-attention "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
        "--num-experts 256 --moe-layer-freq '([0]*3+[1]*58)' --moe-ffn-hidden-size 2048 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-topk 8 --moe-router-enable-expert-bias "
        "--mtp-num-layers 1 --seq-length 4096 --max-position-embeddings 4096 --position-embedding-type rope --swiglu "
        "--disable-bias-linear --bf16 --vocab-size 129280 --tensor-model-parallel-size 1 "
        "--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout 'Et*7|t*8|t*8|t*8|t*8|t*8|t*8|t*6mL' "
        "--expert-model-parallel-size 32 --use-distributed-optimizer --micro-batch-size 1 --global-batch-size 1024 "
        "--moe-grouped-gemm --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
        "--experimental-attention-variant dsa --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 "
        "--dsa-indexer-topk 2048")
"""DeepSeek-V3.2 on 256 H800 GPUs (PP 8 with a layout, EP 32, full recompute)."""


def v32() -> object:
    """DeepSeek-V3 with V3.2's indexer."""
    v3 = load_model("deepseek-v3")
    assert isinstance(v3.attention, MLAAttention)
    return v3.model_copy(update={"name": "deepseek-v3.2", "attention": v3.attention.model_copy(
        update={"indexer": V32_INDEXER})})


def test_the_indexer_weights() -> None:
    """13,959,424 indexer parameters per attention, replicated over TP: V3.2 is V3 plus 61 of them (671.88B)."""
    model = v32()
    assert dsa_indexer_params(7168, model.attention) == PER_LAYER == 13_959_424
    assert model_params(model).total == V3_TOTAL + 61 * PER_LAYER == 671_877_944_064
    v3 = load_model("deepseek-v3")
    block = model.blocks[5]
    assert block_params(model, block).extra - block_params(v3, v3.blocks[5]).extra == PER_LAYER
    assert block_params(model, block).attention == block_params(v3, v3.blocks[5]).attention


def test_a_deepseek_v32_config_reads_the_indexer(tmp_path: Path) -> None:
    """model_type deepseek_v32 is DeepSeek-V3's reader with index_n_heads, index_head_dim and index_topk."""
    v3 = load_model("deepseek-v3")
    att = v3.attention
    assert isinstance(att, MLAAttention) and v3.moe is not None and v3.dense_mlp is not None
    config = {"model_type": "deepseek_v32", "hidden_size": 7168, "vocab_size": 129280, "num_hidden_layers": 61,
              "num_attention_heads": 128, "max_position_embeddings": 163840, "tie_word_embeddings": False,
              "hidden_act": "silu", "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
              "n_shared_experts": 1, "topk_method": "noaux_tc", "num_nextn_predict_layers": 1, "moe_layer_freq": 1,
              "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
              "v_head_dim": 128, "intermediate_size": 18432, "first_k_dense_replace": 3,
              "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
    path = tmp_path / "DeepSeek-V3.2-Exp" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model = architecture_from_hf_config(path)
    assert isinstance(model.attention, MLAAttention) and model.attention.indexer == V32_INDEXER
    assert model_params(model).total == 671_877_944_064
    del config["index_topk"]
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="index_topk"):
        architecture_from_hf_config(path)


def test_a_dsa_launch_line_builds_the_indexer_and_says_how_it_is_priced() -> None:
    """The dsa flags give V3.2's model (with --model deepseek-v3, the line's variant is noted as a difference)."""
    inputs = explain_inputs(None, (), (LINE, "line"), hardware="h800-hgx", gpus=256)
    att = inputs.problem.model.attention
    assert isinstance(att, MLAAttention) and att.indexer == V32_INDEXER
    assert any(n.startswith("--experimental-attention-variant dsa: the indexer's weights are counted")
               for n in inputs.notes)
    account = explain(inputs.problem, inputs.mapping, repairs=0)
    assert account.evaluation.violations == ()
    assert any(a.startswith("DSA: the indexer's weights are held") for a in account.evaluation.ledger.assumptions)
    assert "dsa-scores-not-priced" in {w.rule for w in account.evaluation.warnings}
    compared = explain_inputs(None, (), (LINE, "line"), hardware="h800-hgx", gpus=256, model_name="deepseek-v3")
    assert any("--experimental-attention-variant dsa differs from the problem's model (deepseek-v3" in n
               for n in compared.notes)


def broken_rules(line: str) -> set[str]:
    """The rules a launch line breaks on 256 H800 GPUs."""
    inputs = explain_inputs(None, (), (line, "line"), hardware="h800-hgx", gpus=256)
    return {v.rule for v in explain(inputs.problem, inputs.mapping, repairs=0).evaluation.violations}


CP2 = "--use-distributed-optimizer --context-parallel-size 2 --cp-comm-type"


@pytest.mark.parametrize(("line", "rule", "broken"), [
    (LINE.replace("--disable-bias-linear", ""), "dsa-no-linear-bias", True),
    (LINE.replace("--use-distributed-optimizer", f"{CP2} p2p"), "dsa-cp-allgather-only", True),
    (LINE.replace("--use-distributed-optimizer", f"{CP2} allgather"), "dsa-cp-allgather-only", False),
])
def test_the_dsa_rules(line: str, rule: str, broken: bool) -> None:
    """Biases on the linear layers, and CP other than allgather, are refused; allgather CP is not."""
    assert (rule in broken_rules(line)) is broken


def test_dsa_flags_need_mla_and_the_indexer_shape() -> None:
    """Megatron builds DSA on MLA alone and has no default indexer shape: both are errors naming the flag."""
    with pytest.raises(InputError, match="needs --multi-latent-attention"):
        explain_inputs(None, (), (LINE.replace("--multi-latent-attention", ""), "line"), hardware="h800-hgx", gpus=256)
    with pytest.raises(InputError, match="--dsa-indexer-topk"):
        explain_inputs(None, (), (LINE.replace("--dsa-indexer-topk 2048", ""), "line"), hardware="h800-hgx", gpus=256)
