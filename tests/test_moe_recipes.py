"""The MoE recipes NVIDIA publishes in Megatron-LM's dev branch (dev@d48bd6be examples/moe_recipes, each with the
median model TFLOP/s per GPU its README reports), written as their recipe runner launches them
(tests/data/moe_recipes/). Their dev commit's own code refuses every one of these (the shared Megatron oracle,
main@d98e8a64 and dev@d48bd6be, torch 2.13.0+cpu, session 60): the fused cross-entropy loss on Transformer Engine's
kernels (arguments.py:1697-1702), and DeepSeek-V3 BF16 on H100 also its 61 layers on PP 16 (985-998), which comes
first. On the loss's native kernels, the fix Megatron's message gives, the runs fit, except where an EP64 Hybrid-EP
group straddles two 72-GPU NVLink domains: the recipes that export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64 are
judged on the 64-GPU segments it implies; the one that does not is refused until its problem says so
(hardware.topology.gpus_per_nvlink_domain: 64)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parasol.errors import InputError
from parasol.problems.inputs import explain_inputs
from parasol.solver.diagnose.explain import explain
from parasol.solver.diagnose.megatron_verdict import megatron_verdict

RECIPES = Path(__file__).resolve().parent / "data" / "moe_recipes"
PRESETS = {"h100": "h100-hgx", "b200": "b200-hgx", "b300": "b300-hgx", "gb200": "gb200-nvl72", "gb300": "gb300-nvl72"}
STRADDLING = {"qwen3_235b__gb300__mxfp8_128GPU_TP1PP1EP64_paged_stash_full_cg"}
"""The recipe whose EP64 groups straddle two 72-GPU NVL72 domains (hybridep-even-domains): it does not export
NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64, as the other EP64 Hybrid-EP recipes do (those are judged on the 64-GPU
segments it implies)."""
DEV_ONLY = {"deepseek_v3__gb200__mxfp8_256GPU_TP1PP4EP64"}
"""Recipes with flags only dev's parser has (--chunked-optimizer-state-offload), which parasol does not read."""
READ = sorted(p.stem for p in RECIPES.glob("*.sh") if p.stem not in DEV_ONLY)


def _line(name: str) -> str:
    return (RECIPES / f"{name}.sh").read_text(encoding="utf-8")


def _preset(name: str) -> str:
    return PRESETS[name.split("__")[1]]


def test_every_recipe_is_listed() -> None:
    """The recipes read here are all but the dev-only one, on every GPU kind the recipes name."""
    assert len(READ) == 15 and {_preset(n) for n in READ} == set(PRESETS.values())


@pytest.mark.parametrize("name", READ)
def test_recipes_as_published_are_refused_where_megatron_refuses_them(name: str) -> None:
    """Megatron's first refusal is the first rule parasol breaks at the argument stage."""
    gpus = int(name.split("GPU")[0].rsplit("_", 1)[1])
    verdict = megatron_verdict(_line(name), gpus, _preset(name))
    first = "layers-divisible-by-pp" if name == "deepseek_v3__h100__bf16_1024GPU_TP1PP16EP64" \
        else "te-cross-entropy-fusion-off"
    assert verdict.broken[0] == (first, "A")
    assert ("te-cross-entropy-fusion-off", "A") in verdict.broken


@pytest.mark.parametrize("name", READ)
def test_recipes_on_the_native_loss_kernels_fit(name: str) -> None:
    """With --cross-entropy-fusion-impl native every recipe fits its GPUs' memory and meets every rule, except
    the one whose Hybrid-EP groups straddle NVL72 domains, and DeepSeek-V3 BF16 on H100, whose 61 layers do not
    split over PP 16 without a layout (and, cut evenly where they would, overflow 80 GB without recompute)."""
    line = _line(name).replace("--cross-entropy-fusion-impl te", "--cross-entropy-fusion-impl native")
    inputs = explain_inputs(None, (), (line, str(RECIPES / f"{name}.sh")), hardware=_preset(name))
    account = explain(inputs.problem, inputs.mapping, repairs=0)
    broken = {v.rule for v in account.evaluation.violations}
    if name in STRADDLING:
        assert broken == {"hybridep-even-domains"}
    elif name == "deepseek_v3__h100__bf16_1024GPU_TP1PP16EP64":
        assert broken == {"layers-divisible-by-pp", "memory-fits-hbm"}
    else:
        assert broken == set()


def test_hybridep_ranks_per_domain_sets_the_job_domain() -> None:
    """NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64 (exported, or written before the command) with the Hybrid-EP
    backend: the job runs on 64-GPU segments of the NVL72 domains, noted; above the domain it is an error; without
    Hybrid-EP it changes nothing."""
    name = "qwen3_235b__gb200__mxfp8_128GPU_TP1PP1EP64_partial_cg_overlap"
    line = _line(name)
    segmented = explain_inputs(None, (), (line, name), hardware="gb200-nvl72")
    assert segmented.problem.hardware.topology.gpus_per_nvlink_domain == 64
    assert any(n.startswith("NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64: Hybrid-EP takes 64 consecutive ranks")
               for n in segmented.notes)
    unset = line.replace("export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64\n", "")
    assert explain_inputs(None, (), (unset, name), hardware="gb200-nvl72").problem.hardware.topology \
        .gpus_per_nvlink_domain == 72
    inline = unset.replace("torchrun", "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64 torchrun")
    assert explain_inputs(None, (), (inline, name), hardware="gb200-nvl72").problem.hardware.topology \
        .gpus_per_nvlink_domain == 64
    alltoall = line.replace("--moe-token-dispatcher-type flex", "--moe-token-dispatcher-type alltoall")
    assert explain_inputs(None, (), (alltoall, name), hardware="gb200-nvl72").problem.hardware.topology \
        .gpus_per_nvlink_domain == 72
    with pytest.raises(InputError, match="NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=64 is more ranks"):
        explain_inputs(None, (), (line, name), hardware="b200-hgx")


def test_a_slurm_segment_sets_the_job_domain() -> None:
    """The GB300 recipe that exports no NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN, launched from a batch script with
    `#SBATCH --segment=16` (16 four-GPU nodes per NVL72 rack): judged on 64-GPU domains, where it fits; segments of
    whole racks or more change nothing."""
    name = "qwen3_235b__gb300__mxfp8_128GPU_TP1PP1EP64_paged_stash_full_cg"
    line = _line(name).replace("--cross-entropy-fusion-impl te", "--cross-entropy-fusion-impl native")
    for segment, domain in ((16, 64), (18, 72)):
        inputs = explain_inputs(None, (), (f"#SBATCH --segment={segment}\n{line}", name), hardware="gb300-nvl72")
        assert inputs.problem.hardware.topology.gpus_per_nvlink_domain == domain
        broken = {v.rule for v in explain(inputs.problem, inputs.mapping, repairs=0).evaluation.violations}
        assert broken == (set() if domain == 64 else {"hybridep-even-domains"})


def test_beside_a_problem_file_the_line_s_domain_is_noted_not_applied(tmp_path: Path) -> None:
    """A problem file's hardware is the user's own statement: the launch line's --segment is noted, and the job is
    judged on the problem's 72-GPU domains."""
    name = "qwen3_235b__gb300__mxfp8_128GPU_TP1PP1EP64_paged_stash_full_cg"
    problem = tmp_path / "p.yaml"
    problem.write_text("model: qwen3-235b-a22b\ntraining:\n  seq_len: 4096\n  global_batch: 8192\n  precision: fp8\n"
                       "hardware:\n  preset: gb300-nvl72\n  gpus: 128\n", encoding="utf-8")
    line = "#SBATCH --segment=16\n" + _line(name).replace("--cross-entropy-fusion-impl te", "--cross-entropy-fusion-impl native")
    inputs = explain_inputs(str(problem), (), (line, name))
    assert inputs.problem.hardware.topology.gpus_per_nvlink_domain == 72
    assert any(n.startswith("the launch line (Slurm --segment=16) implies 64-GPU NVLink domains") for n in inputs.notes)
