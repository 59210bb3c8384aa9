"""`solve --emit megatron` (issue 8 parts 1-2): the parallel part of a Megatron-LM launch line, the host
order that makes the placement real, and the round trip through `explain --megatron-args`.

Flags and grammar: Megatron-LM main@d98e8a64 megatron/training/arguments.py (3095-3120, 3652-3659, 925-999),
pipeline_parallel_layer_layout.py:94-145,282-321, transformer_config.py:532-560,2294-2368, and dev@d48bd6be
hybrid_layer_allocation.py:14-29 for DeepSeek-V4's C/H/W symbols; reference/megatron-rules.yaml ids
layout-*, uneven-*, hybrid-pattern-*; rank order megatron-groups.md §1.2-1.5."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from inline_problems import SMALL_MOE

from parasol.constraints.physics.step_time import CalibratedStageTimes
from parasol.errors import InputError
from parasol.problems.derived import interleaved_even_layout, stage_layer_totals
from parasol.problems.inputs import explain_inputs
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping import Mapping
from parasol.problems.mapping_input import build_mapping
from parasol.problems.megatron.layout_string import parse_pipeline_layout
from parasol.problems.megatron.patterns import parse_hybrid_pattern
from parasol.problems.schema import Precision
from parasol.solver.cli import main
from parasol.solver.diagnose.explain import Explanation, explain
from parasol.solver.outputs.emit import (
    format_layout,
    hybrid_pattern,
    launch_script,
    layout_stages,
    layout_string,
    megatron_args,
    round_trip,
)
from parasol.solver.outputs.writers import host_order_text
from parasol.solver.search.solve import solve
from parasol.solver.solutions import bundled_problems, load_bundled

V4_1024 = "problems/deepseek-v4-pro-1024.yaml"
DSV3 = """
name: dsv3-inline
model: deepseek-v3
training: {seq_len: 4096, global_batch: 1024, precision: bf16, recompute: full}
hardware: {preset: h800-hgx, gpus: 1024}
framework: {rule_packs: [megatron-core], options: {moe_token_dispatcher_type: alltoall}}
"""


@pytest.fixture(scope="module")
def small() -> Problem:
    return load_problem_text(SMALL_MOE, source="small-moe-inline.yaml")


@pytest.fixture(scope="module")
def v4() -> Problem:
    return load_problem(V4_1024)


@pytest.fixture(scope="module")
def dsv3() -> Problem:
    return load_problem_text(DSV3, source="dsv3-inline.yaml")


def flags_of(problem: Problem, mapping: Mapping, group: str) -> list[tuple[str, str | None]]:
    """The (flag, value) pairs of one group."""
    return [f.pair for g in megatron_args(problem, mapping).groups if g.name == group for f in g.flags]


def pipeline_of(problem: Problem, **sets: str) -> list[tuple[str, str | None]]:
    return flags_of(problem, build_mapping(problem, sets), "pipeline")


def test_degree_batch_and_dispatcher_groups(small: Problem) -> None:
    """arguments.py:2373 (model_parallel_config.py:55-130 as flags): every degree is stated, SP only with
    TP > 1, the distributed optimizer as the run has it; MoE dispatcher flags (transformer_config.py:891-898)."""
    m = build_mapping(small, {"tp": "2", "pp": "2", "ep": "8", "etp": "1", "mbs": "2"})
    assert flags_of(small, m, "parallel degrees") == [
        ("--tensor-model-parallel-size", "2"), ("--pipeline-model-parallel-size", "2"),
        ("--context-parallel-size", "1"), ("--expert-model-parallel-size", "8"),
        ("--expert-tensor-parallel-size", "1"), ("--sequence-parallel", None), ("--use-distributed-optimizer", None)]
    assert flags_of(small, m, "batch") == [("--micro-batch-size", "2"), ("--global-batch-size", "256"),
                                           ("--seq-length", "4096")]
    assert flags_of(small, m, "MoE dispatch") == [("--moe-token-dispatcher-type", "allgather"),
                                                  ("--moe-grouped-gemm", None)]
    assert flags_of(small, build_mapping(small, {"tp": "1", "ep": "8"}), "parallel degrees")[-1] == \
        ("--use-distributed-optimizer", None)


def test_dense_model_has_no_expert_flags() -> None:
    """A dense model states TP/PP/CP only (EP and ETP are MoE flags, arguments.py:587-588)."""
    problem = load_problem_text("""
name: llama-inline
model: llama-3-8b
training: {seq_len: 8192, global_batch: 128}
hardware: {preset: h100-hgx, gpus: 16}
""", source="llama-inline.yaml")
    args = megatron_args(problem, build_mapping(problem, {"tp": "2", "pp": "2"}))
    names = [f.name for f in args.flags]
    assert "--expert-model-parallel-size" not in names and "--moe-token-dispatcher-type" not in names
    assert args.entry_point == "pretrain_gpt.py"


def test_recompute_flags(small: Problem, v4: Problem) -> None:
    """transformer_config.py:532-560 and megatron-rules.yaml recompute-full-needs-method/-num-layers: full
    recompute of every layer is uniform with 1 layer; selective names the run's modules; none is the default."""
    def recompute(problem: Problem, value: str) -> list[tuple[str, str | None]]:
        return flags_of(problem, build_mapping(problem, {"recompute": value}), "recompute")
    assert recompute(small, "full") == [("--recompute-granularity", "full"), ("--recompute-method", "uniform"),
                                        ("--recompute-num-layers", "1")]
    assert recompute(small, "selective") == [("--recompute-granularity", "selective"),
                                             ("--recompute-modules", "core_attn")]
    assert recompute(v4, "selective")[1] == ("--recompute-modules", "moe_act")
    assert recompute(small, "none") == []


def test_even_split_needs_no_pipeline_flag(small: Problem) -> None:
    """megatron-rules.yaml layers-divisible-by-pp: 12 blocks on PP 4 split evenly by default."""
    assert pipeline_of(small, pp="4", ep="8") == []
    assert pipeline_of(small, pp="4", ep="8", layout="3,3,3,3") == []


def test_uneven_first_and_last_stage_flags(small: Problem) -> None:
    """transformer_config.py:2294-2368 (rules uneven-*): first/last counts when the middle ranks are equal,
    only the flags the cut needs."""
    assert pipeline_of(small, pp="4", ep="8", layout="2,4,4,2") == [
        ("--decoder-first-pipeline-num-layers", "2"), ("--decoder-last-pipeline-num-layers", "2")]
    assert pipeline_of(small, pp="4", ep="8", layout="2,3,3,4") == [
        ("--decoder-first-pipeline-num-layers", "2"), ("--decoder-last-pipeline-num-layers", "4")]
    assert pipeline_of(small, pp="2", ep="8", layout="5,7") == [("--decoder-first-pipeline-num-layers", "5")]
    assert pipeline_of(small, pp="4", ep="8", layout="4,4,4,0") == [
        ("--pipeline-model-parallel-layout", "Et*4|(t*4|)*2,L")]


def test_layout_string_for_other_cuts_and_for_vpp(small: Problem) -> None:
    """arguments.py:3103-3110 and pipeline_parallel_layer_layout.py:282-321: a cut the first/last flags cannot
    state, and every interleaved mapping, gets a layout string in Megatron's flat virtual-stage order."""
    assert pipeline_of(small, pp="4", ep="8", layout="2,5,3,2") == [
        ("--pipeline-model-parallel-layout", "Et*2|t*5|t*3|t*2L")]
    assert pipeline_of(small, pp="2", vpp="2", ep="8", layout="3,3,3,3") == [
        ("--pipeline-model-parallel-layout", "Et*3|(t*3|)*2,t*3L")]


def test_layout_string_places_embedding_loss_and_mtp() -> None:
    """pipeline_parallel_layer_layout.py:94-145 (rules layout-embedding-loss-once, layout-mtp-placement): E
    opens the first stage, m (after every t) and L close the last; runs fold as x*n and (stage|)*n."""
    stages = layout_stages((3, 4, 4, 4, 2), mtp_layers=1)
    assert stages == ["Ettt", "tttt", "tttt", "tttt", "ttmL"]
    text = format_layout(stages)
    assert text == "Et*3|(t*4|)*3,t*2mL"
    parsed = parse_pipeline_layout(text, 17)
    assert parsed.stages == tuple(stages)
    assert parsed.block_counts == (3, 4, 4, 4, 2) and parsed.mtp_stages == (4,)
    assert format_layout(layout_stages((61,), mtp_layers=2)) == "Et*61m*2L"
    assert format_layout(layout_stages((2, 0, 0, 3), mtp_layers=0)) == "Et*2|(|)*2,t*3L"
    assert parse_pipeline_layout("Et*2|(|)*2,t*3L", 5).block_counts == (2, 0, 0, 3)


def test_layout_string_with_mtp_reads_back(dsv3: Problem) -> None:
    """DeepSeek-V3 (61 blocks, 1 MTP layer) on TP2 PP8 VPP2: 16 virtual stages, m in the last one, feasible."""
    mapping = build_mapping(dsv3, {"tp": "2", "pp": "8", "vpp": "2", "ep": "64"})
    layout = (3,) + (4,) * 13 + (3, 3)
    assert layout_string(dsv3, layout) == "Et*3|(t*4|)*13,t*3|t*3mL"
    assert pipeline_of(dsv3, tp="2", pp="8", vpp="2", ep="64") == [("--pipeline-model-parallel-layout",
                                                                    "Et*3|(t*4|)*13,t*3|t*3mL")]
    trip = round_trip(dsv3, mapping)
    assert trip.ok, (trip.differences, trip.violations)


def test_v4_hybrid_pattern_segments_and_symbols(v4: Problem) -> None:
    """dev@d48bd6be hybrid_layer_allocation.py:14-29 and arguments.py:840-862: one attention symbol per block
    by compress ratio (C 4, H 128, W 0) and its MLP symbol, '|' between the virtual stages, '/' + the MTP block."""
    layout = (3,) + (4,) * 14 + (2,)
    pattern = hybrid_pattern(v4, layout)
    ratios = v4.model.attention.compress_ratios
    assert pattern.startswith({128: "H", 4: "C", 0: "W"}[ratios[0]] + "E")
    assert pattern.endswith("/" + {128: "H", 4: "C", 0: "W"}[ratios[61]] + "E")
    parsed = parse_hybrid_pattern(pattern)
    assert parsed.segments == layout and parsed.mtp_depth == 1 and parsed.dsv4
    assert list(parsed.ratios) == list(ratios[:61])
    mapping = build_mapping(v4, {"pp": "16", "cp": "2", "ep": "32", "recompute": "full",
                                 "layout": ",".join(map(str, layout))})
    assert flags_of(v4, mapping, "pipeline") == [("--hybrid-layer-pattern", pattern)]
    assert megatron_args(v4, mapping).entry_point == "pretrain_hybrid.py"


def test_v4_hybrid_pattern_with_vpp_round_trips() -> None:
    """Seed 000's C (8,192 GPUs, CP4) interleaved: 16 pattern segments on PP 8 give VPP 2 back (rule
    hybrid-pattern-segments-divisible)."""
    problem = load_problem("problems/deepseek-v4-pro-8192.yaml")
    mapping = build_mapping(problem, {"pp": "8", "vpp": "2", "cp": "4", "recompute": "full",
                                      "layout": "3,4,4,4,4,4,4,4,4,4,4,4,4,4,3,3"})
    trip = round_trip(problem, mapping)
    assert trip.ok, (trip.differences, trip.violations)
    assert trip.parsed["vpp"] == 2 and trip.parsed["layout"] == list(mapping.layout)


NEMOTRON_H = """
name: nemotron-h-inline
model: nemotron-h-8b
training: {seq_len: 8192, global_batch: 768, precision: bf16, optimizer: adam}
hardware: {preset: h100-hgx, gpus: 256}
"""


def test_layer_wise_pattern_with_empty_segments_round_trips() -> None:
    """A Mamba hybrid cut that leaves some of the last rank's virtual stages empty (problems/empty_stages.py), as
    solve returns on Nemotron-H 8B at PP 2 VPP 8, is emitted with empty `|` segments, which Megatron builds as
    stages of no layer (hybrid_layer_allocation.py select_pipeline_segment); it reads back as the same mapping at
    the same step time and peak memory (before, the reader refused the empty segments as bad input)."""
    problem = load_problem_text(NEMOTRON_H, source="nemotron-h-inline.yaml")
    layout = (3, 3, 4, 3, 3, 3, 4, 3, 3, 0, 4, 4, 3, 0, 4, 8)
    mapping = build_mapping(problem, {"tp": "4", "pp": "2", "cp": "2", "vpp": "8", "mbs": "4", "recompute": "none",
                                      "layout": ",".join(map(str, layout))})
    pattern = dict(flags_of(problem, mapping, "pipeline"))["--hybrid-layer-pattern"]
    assert "||" in pattern and parse_hybrid_pattern(pattern).segments == layout
    trip = round_trip(problem, mapping)
    assert trip.ok, (trip.differences, trip.violations)
    printed = explain(problem, mapping, repairs=0).metrics()
    assert (trip.metrics["step_time_s"], trip.metrics["peak_memory_gb"]) == pytest.approx(
        (printed["step_time_s"], printed["peak_memory_gb"]), rel=1e-9)


@pytest.mark.parametrize("sets", [
    {"pp": "4", "ep": "8"},
    {"pp": "4", "ep": "8", "layout": "2,4,4,2", "recompute": "full"},
    {"pp": "4", "ep": "8", "layout": "2,5,3,2", "recompute": "selective"},
    {"pp": "2", "vpp": "2", "ep": "8", "layout": "2,4,4,2"},
    {"tp": "2", "pp": "2", "ep": "8", "etp": "1", "layout": "5,7"},
])
def test_hand_made_mappings_round_trip(small: Problem, sets: dict[str, str]) -> None:
    """Issue 8 part 2: the emitted flags read back by `explain --megatron-args` are feasible and give the same
    mapping (degrees, batch, recompute, VPP and the cut)."""
    mapping = build_mapping(small, sets)
    trip = round_trip(small, mapping)
    assert trip.ok, (trip.differences, trip.violations)


def test_rank_order_round_trips(v4: Problem) -> None:
    """megatron-groups.md §1.2: the tp-cp-ep-pp-dp order is --use-tp-pp-dp-mapping and reads back."""
    mapping = build_mapping(v4, {"rank_order": "tp-cp-ep-pp-dp"})
    assert ("--use-tp-pp-dp-mapping", None) in flags_of(v4, mapping, "parallel degrees")
    assert not round_trip(v4, mapping).differences


def test_options_fixing_the_mechanism_are_kept(small: Problem) -> None:
    """megatron-rules.yaml account-for-divisible: with --account-for-* in the problem's options the emitted line
    keeps that mechanism; a cut it cannot state is an InputError naming the options."""
    problem = load_problem_text(SMALL_MOE.replace("framework: {rule_packs: [megatron-core]}", "framework: {rule_packs: "
                                "[megatron-core], options: {account_for_embedding_in_pipeline_split: true, "
                                "account_for_loss_in_pipeline_split: true}}"), source="accounted.yaml")
    mapping = build_mapping(problem, {"pp": "2", "ep": "8", "layout": "6,6"})
    assert flags_of(problem, mapping, "pipeline") == [("--account-for-embedding-in-pipeline-split", None),
                                                      ("--account-for-loss-in-pipeline-split", None)]
    assert round_trip(problem, mapping).ok
    with pytest.raises(InputError, match="framework.options"):
        megatron_args(problem, build_mapping(problem, {"pp": "2", "ep": "8", "layout": "5,7"}))


def test_rank_totals() -> None:
    """Virtual stage k runs on pipeline rank k % PP (megatron-groups.md §2.3); a rank's even split over its
    virtual stages gives the layout back."""
    assert stage_layer_totals((3, 4, 4, 4, 3, 4, 4, 4), 4) == (6, 8, 8, 8)
    assert interleaved_even_layout((6, 8, 8, 8), 2) == (3, 4, 4, 4, 3, 4, 4, 4)


def test_host_order_for_seed_a(v4: Problem) -> None:
    """megatron-groups.md §1.5 (W=1024, PP8, EP64, 8-GPU nodes): host line i runs node rank i; EP groups of 64
    contiguous ranks span 8 nodes, PP stage s holds nodes 16s..16s+15, expert-DP partners are 64 ranks apart."""
    text = host_order_text(build_mapping(v4, {}), v4)
    hosts = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(hosts) == 128 and hosts[0] == "node0000 slots=8" and hosts[-1] == "node0127 slots=8"
    assert any(line.startswith("#   EP ") and "16 group(s) of 64" in line and "on 8 node(s)" in line
               for line in text.splitlines())
    assert "#   expert DP                 512 group(s) of 2     rank stride 64 " in text
    assert "#   PP stage 1: nodes 16-31" in text


def test_host_order_names_nvlink_domains() -> None:
    """GB200 NVL72: 4-GPU nodes in 72-GPU domains; a host placeholder names its domain (18 nodes each)."""
    problem = load_problem("problems/deepseek-v4-pro-gb200-nvl72.yaml")
    hosts = [line for line in host_order_text(build_mapping(problem, {}), problem).splitlines()
             if not line.startswith("#")]
    assert hosts[17] == "domain000-node0017 slots=4" and hosts[18] == "domain001-node0018 slots=4"


def test_launch_script_reads_back_with_its_launcher(v4: Problem) -> None:
    """The script's torchrun geometry (--nnodes × --nproc-per-node) is the problem's GPU count, so reading it
    back adds no launcher note."""
    mapping = build_mapping(v4, {"pp": "16", "cp": "2", "ep": "32", "recompute": "full"})
    script = launch_script(v4, mapping, "test")
    assert "torchrun --nnodes 128 --nproc-per-node 8" in script
    trip = round_trip(v4, mapping, text=script)
    assert not trip.differences and not any("launcher" in n for n in trip.notes)


def test_a_deepseek_v4_script_names_the_dev_branch(v4: Problem, small: Problem) -> None:
    """Megatron-LM main@d98e8a64 refuses every DeepSeek-V4 line at parsing (no --cp-partition-mode, no dsv4_hybrid
    attention; the real main and dev@d48bd6be, through megatron_oracle.py, in session 58: 134 of parasol's
    emitted V4 lines refused by main, all accepted by dev), so a V4 script says which branch it needs; others
    do not."""
    script = launch_script(v4, build_mapping(v4, {"pp": "16", "cp": "2", "ep": "32", "recompute": "full"}), "v4")
    assert "# DeepSeek-V4: run it with Megatron-LM dev@d48bd6be" in script
    assert "dev@" not in launch_script(small, build_mapping(small, {}), "small")


LLAMA_8B = """
model: llama-3.1-8b
training: {seq_len: 4096, global_batch: 256}
hardware: {preset: h100-hgx, gpus: 64}
"""


def test_launch_script_sets_the_environment_megatron_checks() -> None:
    """Megatron-LM main@d98e8a64 arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for TP or CP > 1 before
    Blackwell (1453-1479) and refuses it under FSDP (1048, 1166), and Megatron-FSDP needs --ckpt-format
    fsdp_dtensor (1169-1170): the megatron_oracle tool rejected emitted lines that lacked them and accepts them
    with the script's environment. TP 1 and CP 1 need nothing, nor TP 2 on B200."""
    problem = load_problem_text(LLAMA_8B, source="llama-8b-inline.yaml")
    tp2 = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, pp=1, cp=1, mbs=1)
    plain = Mapping(gpus=64, gbs=256, seq_len=4096, tp=1, pp=2, cp=1, mbs=1)
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1 " in launch_script(problem, tp2, "t")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in launch_script(problem, plain, "t")
    blackwell = load_problem_text(LLAMA_8B.replace("h100-hgx", "b200-hgx"), source="llama-8b-b200.yaml")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in launch_script(blackwell, tp2, "t")
    fsdp = load_problem_text(LLAMA_8B.replace("global_batch: 256}", "global_batch: 256, fsdp: megatron-fsdp}"),
                             source="llama-8b-fsdp.yaml")
    script = launch_script(fsdp, tp2, "t")
    assert "\nunset CUDA_DEVICE_MAX_CONNECTIONS " in script and "--ckpt-format fsdp_dtensor" in script
    trip = round_trip(fsdp, tp2, text=script)
    assert trip.ok and not trip.notes
    wrong = round_trip(fsdp, tp2, text=script.replace("--ckpt-format fsdp_dtensor", "--ckpt-format torch_dist"))
    assert any(n.startswith("--ckpt-format torch_dist: this FSDP needs fsdp_dtensor") for n in wrong.notes)


def test_torch_fsdp2_launch_has_what_megatron_checks() -> None:
    """Megatron-LM main@d98e8a64 arguments.py:1031-1049 refuses --use-torch-fsdp2 with the distributed optimizer,
    with gradient-accumulation fusion (on by default) or tied embeddings, and --overlap-param-gather without the
    distributed optimizer or Megatron-FSDP (1024-1026): the megatron_oracle tool rejected parasol's first torch
    FSDP2 lines for each in turn and passes the argument checks of the line written now. Read back, the line
    gives the same mapping with no note; one with the distributed optimizer, without the fusion switched off or
    with --fp16 (1046-1047) is noted."""
    problem = load_problem_text(LLAMA_8B.replace("global_batch: 256}", "global_batch: 256, fsdp: torch-fsdp2}"),
                                source="llama-8b-fsdp2.yaml")
    mapping = Mapping(gpus=64, gbs=256, seq_len=4096, tp=2, pp=1, cp=1, mbs=1)
    script = launch_script(problem, mapping, "t")
    for flag in ("--use-torch-fsdp2", "--ckpt-format torch_dist", "--no-gradient-accumulation-fusion",
                 "--untie-embeddings-and-output-weights", "--overlap-grad-reduce"):
        assert flag in script
    assert "--use-distributed-optimizer" not in script and "--overlap-param-gather" not in script
    trip = round_trip(problem, mapping, text=script)
    assert trip.ok and not trip.notes
    both = round_trip(problem, mapping,
                      text=script.replace("--use-torch-fsdp2", "--use-torch-fsdp2 --use-distributed-optimizer"))
    assert any(n.startswith("--use-distributed-optimizer: --use-torch-fsdp2 refuses it") for n in both.notes)
    fused = round_trip(problem, mapping, text=script.replace("--no-gradient-accumulation-fusion", ""))
    assert any("add --no-gradient-accumulation-fusion" in n for n in fused.notes)
    half = round_trip(problem, mapping, text=script.replace("--use-torch-fsdp2", "--use-torch-fsdp2 --fp16"))
    assert any(n.startswith("--fp16: --use-torch-fsdp2 refuses it") for n in half.notes)


@pytest.mark.slow
@pytest.mark.parametrize("path", bundled_problems(), ids=lambda p: p.stem)
def test_first_solved_mapping_of_every_bundled_problem_round_trips(path: Path) -> None:
    """Issue 8 "Must show": the first mapping of each bundled problem's solve round-trips (under the memory
    saving solve chose for it, which its launch line carries)."""
    problem = load_bundled(path)
    result = solve(problem, CalibratedStageTimes(problem), top=1, time_limit_s=600)
    for solved in result.mappings[:1]:
        trip = round_trip(solved.explanation.problem, solved.explanation.mapping)
        assert trip.ok, (trip.differences, trip.violations)
        printed = solved.explanation.metrics()
        assert (trip.metrics["step_time_s"], trip.metrics["peak_memory_gb"]) == pytest.approx(
            (printed["step_time_s"], printed["peak_memory_gb"]), rel=1e-9)


def _explained(sets: dict[str, str]) -> Explanation:
    """explain of the bundled 1,024-GPU DeepSeek-V4-Pro problem under `--set` values."""
    inputs = explain_inputs(V4_1024, tuple(f"{k}={v}" for k, v in sets.items()), None)
    return explain(inputs.problem, inputs.mapping, repairs=0)


def test_tp_overlap_never_applies_to_a_tp_group_of_one() -> None:
    """At TP 1 Megatron switches sequence parallelism off (arguments.py:1430-1439) and --tp-comm-overlap needs it,
    so the launch line never carries the flag and the step time must not hide the TP column (there, the recomputed
    forward's EP exchanges) behind the GEMMs: DeepSeek-V4-Pro TP1 PP16 CP4 EP32 with full recompute prices the same
    with tp_comm_overlap unset as with it off, and its emitted launch line reads back at that step time (before,
    the unset switch hid those exchanges while the read-back line priced them: DeepSeek-V4-Flash TP1 PP16 CP8 EP128
    with full recompute on 32,768 GPUs printed 1.919 s and read back at 2.198 s)."""
    sets = {"tp": "1", "pp": "16", "cp": "4", "ep": "32", "etp": "1", "vpp": "1", "mbs": "1", "recompute": "full",
            "moe_token_dispatcher_type": "flex"}
    unset = _explained(sets)
    off = _explained({**sets, "tp_comm_overlap": "false"})
    assert unset.metrics()["step_time_s"] == off.metrics()["step_time_s"]
    trip = round_trip(unset.problem, unset.mapping)
    assert trip.ok and trip.metrics["step_time_s"] == pytest.approx(unset.metrics()["step_time_s"], rel=1e-9)


@pytest.mark.slow
def test_cli_emit_then_explain(tmp_path: Path) -> None:
    """`parasol solve … --emit megatron --pick 1 --out DIR` writes the launch script and host order; `parasol
    explain PROBLEM --megatron-args-file` judges it feasible and gives back mapping 1."""
    runner = CliRunner()
    solved = runner.invoke(main, ["solve", V4_1024, "--emit", "megatron", "--pick", "1", "--out", str(tmp_path), "--json"])
    assert solved.exit_code == 0, solved.output
    emitted = json.loads(solved.stdout)["mappings"]
    assert [e["index"] for e in emitted] == [1]
    script = tmp_path / "deepseek-v4-pro-1024.1.megatron_args.sh"
    assert script.read_text() == emitted[0]["script"]
    assert (tmp_path / "deepseek-v4-pro-1024.1.hosts.txt").is_file()
    explained = runner.invoke(main, ["explain", V4_1024, "--megatron-args-file", str(script), "--json"])
    assert explained.exit_code == 0, explained.output
    back = json.loads(explained.stdout)
    assert back["feasible"] and back["notes"] == []
    assert {k: back["mapping"][k] for k in emitted[0]["mapping"]} == emitted[0]["mapping"]


def test_sharding_overlap_and_offload_flags_round_trip(small: Problem) -> None:
    """FSDP, the overlap switches parasol prices as on, delayed wgrad and offloading are emitted as
    Megatron flags and read back into the same training and options (arguments.py:2918-2922,3121,3148,3190)."""
    from parasol.problems.mapping_input import apply_settings
    from parasol.problems.megatron.launch import apply_launch, parse_launch
    problem = apply_settings(small, {"fsdp": "megatron-fsdp", "optimizer_cpu_offload": "true",
                                     "use_precision_aware_optimizer": "true",
                                     "optimizer_offload_fraction": "0.5", "offload_modules": "core_attn,attn_proj"})
    mapping = build_mapping(problem, {"tp": "2", "ep": "8", "etp": "1"})
    line = megatron_args(problem, mapping).text()
    for flag in ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                 "--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--optimizer-cpu-offload",
                 "--optimizer-offload-fraction 0.5", "--fine-grained-activation-offloading",
                 "--offload-modules core_attn attn_proj"):
        assert flag in line
    script = launch_script(problem, mapping, "t")
    assert "\nexport NVTE_CPU_OFFLOAD_V1=1 " in script  # TE >= 2.10 asks for it (arguments.py:1936-1939)
    updated, back, _ = apply_launch(problem, parse_launch(script, model=problem.model), {})
    assert back == mapping and updated.training.fsdp == "megatron-fsdp"
    opts = updated.spec.framework.options
    assert opts.overlap_grad_reduce and opts.overlap_param_gather and opts.tp_comm_overlap
    assert opts.optimizer_offload_fraction == 0.5 and opts.offload_modules == ("core_attn", "attn_proj")


def test_memory_saving_precision_flags_round_trip(small: Problem) -> None:
    """The FP8 recipe, the FP8 SwiGLU input store and the precision-aware optimizer's BF16 moments (the
    DeepSeek-V3 report's §3.3 choices in Megatron's flags: transformer_config.py:227-229,594-599;
    arguments.py:3667-3685) are emitted and read back into the same options."""
    from parasol.problems.mapping_input import apply_settings
    from parasol.problems.megatron.launch import apply_launch, parse_launch
    problem = apply_settings(small, {"fp8_recipe": "blockwise", "activation_func_fp8_input_store": "true",
                                     "use_precision_aware_optimizer": "true", "exp_avg_dtype": "bf16",
                                     "exp_avg_sq_dtype": "bf16"})
    problem = dataclasses.replace(problem, spec=problem.spec.model_copy(update={
        "training": problem.training.model_copy(update={"precision": Precision.fp8})}))
    mapping = build_mapping(problem, {"tp": "2", "ep": "8", "etp": "1"})
    args = megatron_args(problem, mapping)
    line = args.text()
    for flag in ("--fp8-recipe blockwise", "--use-precision-aware-optimizer", "--exp-avg-dtype bf16",
                 "--exp-avg-sq-dtype bf16"):
        assert flag in line
    assert "--main-params-dtype" not in line and "--activation-func-fp8-input-store" not in line
    assert args.in_code == ("activation_func_fp8_input_store=True",)
    assert "# Set in code, on the TransformerConfig" in launch_script(problem, mapping, "t")
    updated, back, _ = apply_launch(problem, parse_launch(launch_script(problem, mapping, "t"), model=problem.model), {})
    opts = updated.spec.framework.options
    assert back == mapping and opts.fp8_recipe == "blockwise" and opts.activation_func_fp8_input_store
    assert opts.use_precision_aware_optimizer and (opts.exp_avg_dtype, opts.exp_avg_sq_dtype) == ("bf16", "bf16")


def test_cpu_offloading_flags_round_trip(small: Problem) -> None:
    """CPU offloading with its layer count (model_parallel_config.py:458-474) is emitted as the count alone, which
    turns it on (arguments.py:1950-1951; Megatron-LM has no --cpu-offloading, which parasol wrote before and the
    oracle refuses as an unrecognized argument), and read back."""
    from parasol.problems.mapping_input import apply_settings
    from parasol.problems.megatron.launch import apply_launch, parse_launch
    problem = apply_settings(small, {"cpu_offloading": "true", "cpu_offloading_num_layers": "4"})
    mapping = build_mapping(problem, {"tp": "2", "pp": "1", "ep": "8", "etp": "1"})
    assert [f.pair for f in megatron_args(problem, mapping).flags if "cpu-offloading" in f.name] == [
        ("--cpu-offloading-num-layers", "4")]
    updated, _, _ = apply_launch(small, parse_launch("--cpu-offloading-num-layers 4", model=small.model), {})
    opts = updated.spec.framework.options
    assert opts.cpu_offloading and opts.cpu_offloading_num_layers == 4 and opts.cpu_offloading_activations


def test_a_launch_line_without_overlap_flags_runs_without_overlap(small: Problem) -> None:
    """Megatron's overlap switches are store_true: a line without them is priced with nothing hidden."""
    from parasol.problems.megatron.launch import apply_launch, parse_launch
    parsed = parse_launch("--tensor-model-parallel-size 2 --expert-model-parallel-size 8 --sequence-parallel",
                          model=small.model)
    updated, _, _ = apply_launch(small, parsed, {})
    opts = updated.spec.framework.options
    assert opts.tp_comm_overlap is False and opts.overlap_grad_reduce is False and opts.overlap_param_gather is False


def test_dualpipe_cannot_be_emitted_or_searched(small: Problem) -> None:
    """DualPipe is DeepSeek's schedule, not Megatron's: emit and solve say so instead of guessing."""
    from parasol.problems.mapping_input import apply_settings
    dual = apply_settings(small, {"pipeline_schedule": "dualpipe"})
    mapping = build_mapping(dual, {"pp": "2", "ep": "8"})
    with pytest.raises(InputError, match="no dualpipe schedule"):
        megatron_args(dual, mapping)
    with pytest.raises(InputError, match="pipeline_schedule"):
        solve(dual, CalibratedStageTimes(dual), top=1, time_limit_s=5)




def test_every_flag_the_emitter_writes_is_one_megatrons_parser_defines() -> None:
    """Every flag literal of solver/outputs/emit.py is an option of Megatron-LM main's own parser
    (problems/megatron/megatron_parser_flags.txt, printed by bench/megatron_parser_flags.py) or a DeepSeek-V4 dev flag:
    the emitter wrote --cpu-offloading, --no-cpu-offloading-activations and --activation-func-fp8-input-store,
    which main builds no flag for (arguments.py:2307-2330), so Megatron stopped at parsing those lines."""
    import ast
    import re
    from pathlib import Path

    import parasol.solver.outputs.emit as emit_module
    from parasol.problems.megatron.flags import megatron_parser_flags
    from parasol.problems.megatron.launch import DEV_FLAGS

    parser = megatron_parser_flags()
    assert len(parser) == 877
    tree = ast.parse(Path(emit_module.__file__).read_text(encoding="utf-8"))
    written = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
               and re.fullmatch(r"--[a-z0-9][a-z0-9-]*", n.value)}
    assert len(written) > 50 and written - parser == {"--cp-partition-mode", "--dynamic-context-parallel"} <= DEV_FLAGS


def test_config_only_flags_are_read_and_noted() -> None:
    """--cpu-offloading, --no-cpu-offloading-activations and --activation-func-fp8-input-store: Megatron-LM main
    has no such flags (the oracle: unrecognized arguments); a line with them is judged with the settings they
    name, and each is noted as refused."""
    from parasol.problems.megatron.launch import parse_launch

    parsed = parse_launch("--tensor-model-parallel-size 2 --cpu-offloading --cpu-offloading-num-layers 2 "
                          "--no-cpu-offloading-activations --activation-func-fp8-input-store")
    opts = parsed.options
    assert opts.cpu_offloading and not opts.cpu_offloading_activations and opts.activation_func_fp8_input_store
    for flag in ("--cpu-offloading", "--no-cpu-offloading-activations", "--activation-func-fp8-input-store"):
        assert [n for n in parsed.notes if n.startswith(f"{flag}: Megatron-LM has no such flag")], flag
