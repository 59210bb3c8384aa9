"""NVIDIA's DeepSeek-V4 MoE recipes (Megatron-LM dev@d48bd6be examples/moe_recipes/, copied into
tests/data/moe_recipes/) read as launch lines: the V4 model is built from the dev branch's flags
(--experimental-attention-variant dsv4_hybrid, --o-groups, --csa-compress-ratios, --moe-n-hash-layers,
--enable-hyper-connections, …) with the catalog's shapes, and explain gives both recipes a verdict, with the model
built or with --model (the flags then compared)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from parasol.constraints.evaluate import evaluate
from parasol.errors import InputError
from parasol.problems.inputs import explain_inputs
from parasol.problems.megatron.launch import parse_launch
from parasol.problems.model.architecture import DSV4Attention
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import model_params
from parasol.solver.cli import main

DATA = Path(__file__).resolve().parent / "data" / "moe_recipes"
FLASH = DATA / "deepseek_v4_flash__gb200__mxfp8_SL4K_128GPU_TP1PP1EP64.line"
PRO = DATA / "deepseek_v4_pro__gb300__mxfp8_SL4K_256GPU_TP1PP4EP64.line"
RECIPES = {"deepseek-v4-flash": (FLASH, "gb200-nvl72", 128), "deepseek-v4-pro": (PRO, "gb300-nvl72", 256)}
TOTALS = {"deepseek-v4-flash": (284_332_240_471, 6_610_048_891), "deepseek-v4-pro": (1_572_997_201_763, 25_840_145_979)}
"""Main-model and MTP parameters of the catalog files (their header comments; reference/model-specs.yaml)."""


def command(path: Path) -> str:
    """The recipe's launch command (the line after the header comments)."""
    return path.read_text(encoding="utf-8").strip()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_flags_build_the_catalog_model(name: str) -> None:
    """The dev flags give the catalog's V4 shapes: attention, per-block ratios, hash layers, mHC and parameters."""
    built = parse_launch(command(RECIPES[name][0])).model
    catalog = load_model(name)
    assert built is not None and isinstance(built.attention, DSV4Attention)
    assert built.attention == catalog.attention
    assert (built.blocks, built.mtp_blocks) == (catalog.blocks, catalog.mtp_blocks)
    assert built.hc_mult == catalog.hc_mult == 4 and built.moe is not None and built.moe.num_hash_layers == 3
    params = model_params(built)
    assert params == model_params(catalog) and (params.total, params.mtp) == TOTALS[name]


def test_the_tokenizer_names_the_vocabulary() -> None:
    """The recipes' HuggingFace tokenizer unsloth/DeepSeek-V3 is the catalog's deepseek-v3: its 129,280 tokens
    (40 × --make-vocab-size-divisible-by 3232), noted, not warned about; another tokenizer keeps the GPT-2
    vocabulary and the warning (build_tokenizer.py:133-152): 16 × 3232."""
    parsed = parse_launch(command(FLASH))
    assert parsed.model is not None and parsed.model.vocab_size == 129_280 and parsed.warnings == ()
    assert any(n.startswith("--tokenizer-model unsloth/DeepSeek-V3: the vocabulary of the catalog's deepseek-v3")
               for n in parsed.notes)
    other = parse_launch(command(FLASH).replace("unsloth/DeepSeek-V3", "my-org/my-tokenizer"))
    assert other.model is not None and other.model.vocab_size == 51_712
    assert [w.flag for w in other.warnings] == ["--vocab-size"]


def verdict(name: str, *extra: str) -> tuple[int, str]:
    """explain on a recipe: exit code and output."""
    path, hardware, gpus = RECIPES[name]
    out = CliRunner().invoke(main, ["explain", "--hardware", hardware, "--gpus", str(gpus), *extra,
                                    "--megatron-args-file", str(path)])
    return out.exit_code, out.output


@pytest.mark.parametrize("name", sorted(RECIPES))
@pytest.mark.parametrize("with_model", [False, True])
def test_explain_gives_each_recipe_a_verdict(name: str, with_model: bool) -> None:
    """Both recipes are judged (exit 0 or 1 with a verdict, model TFLOP/s and peak memory), from the flags alone and
    with --model; with --model the line's V4 flags are compared with the catalog and agree."""
    code, output = verdict(name, *(("--model", name) if with_model else ()))
    assert code in (0, 1), output
    assert re.search(r"^verdict +(FEASIBLE|INFEASIBLE)", output, re.M)
    assert "model TFLOP/s/GPU" in output and "peak memory" in output
    assert "unrecognized arguments" not in output and "dev-branch flag" not in output
    assert output.startswith(name if with_model else "megatron-args")
    assert with_model == ("model flags compared with the problem's model" in output)
    assert "differs from the problem" not in output


def test_v4_flags_that_differ_from_the_catalog_model_are_noted() -> None:
    """With --model the catalog is used; each V4 flag that disagrees with it is noted."""
    path, hardware, gpus = RECIPES["deepseek-v4-flash"]
    line = command(path) + " --o-groups 4 --moe-n-hash-layers 2 --csa-compress-ratios ([0]*44) --num-residual-streams 2"
    ex = explain_inputs(None, (), (line, "--megatron-args"), hardware=hardware, gpus=gpus,
                        model_name="deepseek-v4-flash")
    assert ex.problem.model == load_model("deepseek-v4-flash")
    differing = [n.split(" ")[0] for n in ex.notes if "differs from the problem" in n]
    assert differing == ["--o-groups", "--moe-n-hash-layers", "mHC", "--csa-compress-ratios"]


MINIMAL = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 1000 --seq-length 4096 "
           "--position-embedding-type rope --num-experts 8 --multi-latent-attention "
           "--experimental-attention-variant dsv4_hybrid --q-lora-rank 256 --dsa-indexer-n-heads 4 "
           "--dsa-indexer-head-dim 64 --dsa-indexer-topk 128 --csa-compress-ratios ([4,128]*2)")


def test_megatrons_defaults_fill_the_absent_v4_flags() -> None:
    """o_groups 8, o_lora_rank 1024 (arguments.py:4916-4927), v_head_dim 128 (4893), rope dim 64 (4886-4891), window
    128 (transformer_config.py:369), no hash layers (874), one residual stream without mHC (1212-1216)."""
    model = parse_launch(MINIMAL).model
    assert model is not None and isinstance(model.attention, DSV4Attention)
    att = model.attention
    assert (att.o_groups, att.o_lora_rank, att.head_dim, att.qk_rope_head_dim, att.sliding_window) == (8, 1024, 128, 64, 128)
    assert att.compress_ratios == (4, 128, 4, 128)
    assert model.moe is not None and model.moe.num_hash_layers == 0 and model.hc_mult == 1


@pytest.mark.parametrize(("drop", "flag"), [
    ("--q-lora-rank 256", "--q-lora-rank"),
    ("--dsa-indexer-topk 128", "--dsa-indexer-topk"),
    ("--csa-compress-ratios ([4,128]*2)", "--csa-compress-ratios"),
])
def test_missing_v4_dimensions_name_their_flag(drop: str, flag: str) -> None:
    """Dimensions Megatron leaves unset (arguments.py:4869-4873, transformer_config.py:325-332, 1745) are errors
    naming the flag."""
    with pytest.raises(InputError) as caught:
        parse_launch(MINIMAL.replace(drop, ""))
    assert caught.value.field == flag


def test_too_few_compress_ratios_are_refused() -> None:
    """One ratio per block and MTP block at least (transformer_config.py:1746-1756)."""
    with pytest.raises(InputError, match="must be at least num_layers") as caught:
        parse_launch(MINIMAL + " --mtp-num-layers 1")
    assert caught.value.field == "--csa-compress-ratios"


def test_mhc_recompute_with_offloading_is_judged_as_dev_judges_it() -> None:
    """V4 runs on dev, which refuses mHC recompute only with the norms offloaded (dev@d48bd6be
    transformer_config.py:2314-2335; main refuses any offloading): the Pro recipe offloads core_attn and passes,
    with attn_norm offloaded it breaks mhc-recompute-module."""
    path, hardware, gpus = RECIPES["deepseek-v4-pro"]
    line = command(path)
    assert "--offload-modules core_attn" in line and "mhc" in line
    for offloaded, broken in (("core_attn", False), ("attn_norm", True)):
        inputs = explain_inputs(None, (), (line.replace("--offload-modules core_attn", f"--offload-modules {offloaded}"),
                                           str(path)), hardware=hardware, gpus=gpus)
        rules = {v.rule for v in evaluate(inputs.problem, inputs.mapping).violations}
        assert ("mhc-recompute-module" in rules) is broken
