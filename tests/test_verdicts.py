"""A launch line Megatron-LM would refuse gets a verdict (exit 1: rule ids, slack, source, stage, minimal
conflict), never exit 2; any world size is judged, on partial nodes (issue 17).

Sources: Megatron-LM main@d98e8a64 arguments.py:424-434 (world vs TP·PP·CP), 927-939 (one virtual-stage
flag), 953-977 (layers per virtual stage; 954-956 not with uneven first/last stages), 1331-1333 (hidden vs heads); parallel_state.py:870-884 (world vs ETP·EP·PP); attention.py:349-365
(query groups vs heads at the model build); transformer_config.py:2661-2689 (router checks).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from parasol.solver.cli import main

BASE = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
        "--micro-batch-size 1 --global-batch-size 16 --bf16")
MOE = " --num-experts 16 --moe-router-topk 2 --disable-bias-linear"


def explain(args: str, gpus: int | None = 8) -> tuple[int, dict]:
    """Exit code and JSON of `parasol explain --hardware h100-hgx [--gpus N] --megatron-args ARGS --json`."""
    argv = ["explain", "--hardware", "h100-hgx", "--megatron-args", args, "--json"]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.output)


@pytest.mark.parametrize(("extra", "rule", "stage"), [
    (" --tensor-model-parallel-size 16", "world-divisible-by-model-size", "A"),
    (" --pipeline-model-parallel-size 16", "world-divisible-by-model-size", "A"),
    (" --context-parallel-size 16", "world-divisible-by-model-size", "A"),
    (MOE + " --expert-model-parallel-size 16", "world-divisible-by-expert-grid", "I"),
    (" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 8", "vpp-layers-per-rank-divisible", "B"),
    (" --num-layers 12 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4",
     "vpp-from-layers-per-vstage", "A"),
    (" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--num-virtual-stages-per-pipeline-rank 2", "vpp-args-mutually-exclusive", "A"),
    (" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--pipeline-model-parallel-layout Et*4|t*4L", "vpp-args-mutually-exclusive", "A"),
    (" --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
     "--pipeline-model-parallel-layout Et*2|t*2|t*2|t*2L", "vpp-args-mutually-exclusive", "A"),
    (" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--decoder-first-pipeline-num-layers 4", "vpp-layers-per-vstage-excludes-uneven", "A"),
    (" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
     "--decoder-last-pipeline-num-layers 4", "vpp-layers-per-vstage-excludes-uneven", "A"),
    (" --hidden-size 1001", "hidden-divisible-by-heads", "A"),
    (" --group-query-attention --num-query-groups 3", "query-groups-divide-heads", "B"),
    (MOE.replace("topk 2", "topk 1"), "topk1-needs-pre-softmax", "C"),
    (MOE + " --moe-router-group-topk 2", "group-limited-routing", "C"),
])
def test_a_mapping_that_cannot_run_is_a_verdict(extra: str, rule: str, stage: str) -> None:
    """Exit 1 with the rule, its negative slack, source and Megatron stage, and a minimal conflict."""
    code, data = explain(BASE + extra)
    assert code == 1
    broken = {v["rule"]: v for v in data["violations"]}
    assert rule in broken and broken[rule]["slack"] < 0 and broken[rule]["stage"].startswith(stage)
    assert broken[rule]["source"].startswith("Megatron-LM") and data["minimal_conflict"]


def test_conflicting_virtual_stage_flags_are_the_only_stage_a_verdict() -> None:
    """Two virtual-stage flags that would each give a runnable VPP: Megatron stops at the one-flag assert
    (arguments.py:927-939) and derives nothing, so that rule alone is broken at argument validation."""
    code, data = explain(BASE + " --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
                                "--num-virtual-stages-per-pipeline-rank 3")
    assert code == 1
    at_a = [v["rule"] for v in data["violations"] if v["stage"].startswith("A")]
    assert at_a == ["vpp-args-mutually-exclusive"]
    assert data["minimal_conflict"] == ["vpp-args-mutually-exclusive"]


@pytest.mark.parametrize(("schedule", "extra", "rule"), [
    ("dualpipe", " --pipeline-model-parallel-size 1", "dualpipe-even-pp"),
    ("dualpipe", " --pipeline-model-parallel-size 2 --global-batch-size 8", "dualpipe-microbatches"),
    ("dualpipe", " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2",
     "dualpipe-stages-per-rank"),
    ("dualpipev", " --pipeline-model-parallel-size 2", "dualpipev-stages-per-rank"),
    ("dualpipev", " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
     "--global-batch-size 8", "dualpipev-microbatches"),
])
def test_dualpipe_requirements_are_verdicts(schedule: str, extra: str, rule: str) -> None:
    """deepseek-ai/DualPipe dualpipe.py:332-333 (even PP, even m >= 2·PP), dualpipev.py:318 (m >= 2·PP) and the
    stages a rank holds: parasol rules with their source, not bad input."""
    argv = ["explain", "--hardware", "h100-hgx", "--gpus", "8", "--megatron-args", BASE + extra,
            "--set", f"pipeline_schedule={schedule}", "--json"]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    broken = {v["rule"]: v for v in json.loads(result.output)["violations"]}
    assert broken[rule]["slack"] < 0 and broken[rule]["source"].startswith("deepseek-ai/DualPipe")


def test_missing_gbs_on_a_world_the_model_size_does_not_divide_is_a_verdict() -> None:
    """--global-batch-size defaults to MBS·DP; when TP·PP·CP does not divide the world DP is rounded down
    and world-divisible-by-model-size says why Megatron stops."""
    code, data = explain(BASE.replace(" --global-batch-size 16", "") + " --tensor-model-parallel-size 3")
    assert code == 1 and "world-divisible-by-model-size" in {v["rule"] for v in data["violations"]}


@pytest.mark.parametrize(("gpus", "per_node", "nodes"), [(4, 4, 1), (7, 7, 1), (9, 3, 3), (12, 6, 2), (63, 7, 9)])
def test_any_world_size_is_judged_on_partial_nodes(gpus: int, per_node: int, nodes: int) -> None:
    """Whole nodes when the count fills them, else the largest count per node that divides it."""
    code, data = explain(BASE.replace("--global-batch-size 16", f"--global-batch-size {2 * gpus}"), gpus)
    assert code == 0
    metrics = data["metrics"]
    assert (metrics["ranks_per_node"], metrics["nodes"], metrics["idle_gpus"]) == (per_node, nodes, nodes * (8 - per_node))


def test_partial_nodes_cost_bandwidth() -> None:
    """9 GPUs as 3 per node: the data-parallel group crosses 3 nodes and the step is slower than on 8 GPUs
    of one node (the gradient reduction leaves NVLink)."""
    _, one_node = explain(BASE.replace("--global-batch-size 16", "--global-batch-size 72"), 8)
    _, three_nodes = explain(BASE.replace("--global-batch-size 16", "--global-batch-size 72"), 9)
    dp = {g["group"]: g for g in three_nodes["groups"]}["dp_attn"]
    assert (dp["max_nodes"], dp["inside_node"]) == (3, False)
    per_gpu = lambda d: d["metrics"]["tokens_per_s_per_gpu"]  # noqa: E731
    assert per_gpu(three_nodes) < per_gpu(one_node)


def test_the_launcher_sets_ranks_per_node() -> None:
    """torchrun --nproc_per_node 4 --nnodes 2 places 4 ranks on each of 2 nodes, 8 GPUs idle."""
    code, data = explain("torchrun --nproc_per_node 4 --nnodes 2 pretrain_gpt.py " + BASE, None)
    assert code == 0
    assert (data["metrics"]["ranks_per_node"], data["metrics"]["nodes"], data["metrics"]["idle_gpus"]) == (4, 2, 8)


def test_set_gpus_places_the_ranks_of_that_job(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    """`--set gpus=9` on a 64-GPU problem judges a 9-GPU job: 3 ranks on each of 3 nodes."""
    from inline_problems import SMALL_MOE

    path = tmp_path / "small.yaml"
    path.write_text(SMALL_MOE)
    result = CliRunner().invoke(main, ["explain", str(path), "--set", "gpus=9", "--set", "gbs=36", "--json"])
    assert result.exit_code in (0, 1), result.output
    metrics = json.loads(result.output)["metrics"]
    assert (metrics["nodes"], metrics["ranks_per_node"], metrics["idle_gpus"]) == (3, 3, 15)
