"""`explain --megatron-args`: a Megatron-LM launch line or script read into model, mapping, options and
training (issue 3 part 4, "a launch script is enough"); Megatron's defaults from
Megatron-LM main@d98e8a64 megatron/training/arguments.py and transformer_config.py."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from parasol.constraints.evaluate import evaluate
from parasol.errors import InputError
from parasol.problems.derived import derive
from parasol.problems.inputs import ExplainInputs, explain_inputs
from parasol.problems.loader import load_problem
from parasol.problems.megatron.launch import apply_launch, launch_problem, parse_launch
from parasol.problems.megatron.patterns import moe_pattern, parse_hybrid_pattern, parse_layer_freq
from parasol.problems.megatron.shell import launch_command
from parasol.problems.model.catalog import load_model
from parasol.problems.model.params import model_params
from parasol.solver.cli import main

PROBLEM = "problems/deepseek-v4-pro-1024.yaml"
SEED_A = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 8 --context-parallel-size 1 "
          "--expert-model-parallel-size 64 --expert-tensor-parallel-size 1 --micro-batch-size 1 "
          "--global-batch-size 4096")
LLAMA_8B = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
            "--num-query-groups 8 --kv-channels 128 --ffn-hidden-size 14336 --swiglu --disable-bias-linear "
            "--normalization RMSNorm --untie-embeddings-and-output-weights --padded-vocab-size 128256 "
            "--position-embedding-type rope --max-position-embeddings 131072 --seq-length 8192 "
            "--micro-batch-size 1 --global-batch-size 128 --bf16 --use-distributed-optimizer")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def explain_json(*args: str) -> dict:
    result = run("explain", *args, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def inputs(text: str, *sets: str, problem: str | None = PROBLEM, **standalone) -> ExplainInputs:
    """What `explain` would judge for a launch line (without running every rule)."""
    return explain_inputs(problem, sets, (text, "--megatron-args"), **standalone)


def degrees(ex: ExplainInputs) -> tuple[int, int, int]:
    """D_a, D_e and m of the judged mapping."""
    d = derive(ex.problem.model, ex.mapping)
    return int(d.dp_attn), int(d.dp_expert), int(d.num_microbatches)


def test_seed_000_fragment_a_gives_the_seeds_degrees() -> None:
    """Seed 000 §从正确性和显存开始: the A fragment on 1,024 GPUs gives D_a 128, D_e 2, m = 32."""
    ex = inputs(SEED_A)
    assert degrees(ex) == (128, 2, 32)
    m = ex.mapping
    assert (m.tp, m.pp, m.cp, m.ep, m.expert_tp, m.mbs, m.gbs) == (1, 8, 1, 64, 1, 1, 4096)
    assert ex.notes == () and ex.warnings == ()


def test_whole_lines_switch_the_distributed_optimizer_fragments_keep_the_problems() -> None:
    """A fragment of parallel flags (seed 000's configuration A) keeps the problem's distributed optimizer; a
    whole launch line (it names its model) without --use-distributed-optimizer runs without it in Megatron, so it
    is judged so, noted, and its --overlap-param-gather breaks overlap-param-gather (arguments.py:1024-1026): the
    line was judged feasible with sharded optimizer memory before. Likewise without --sequence-parallel at TP 2."""
    fragment = inputs(SEED_A)
    assert fragment.problem.training.distributed_optimizer and fragment.notes == ()
    whole = inputs(SEED_A + " --num-layers 61 --overlap-param-gather --overlap-grad-reduce")
    assert not whole.problem.training.distributed_optimizer
    assert any(n.startswith("no --use-distributed-optimizer: judged without") for n in whole.notes)
    verdict = evaluate(whole.problem, whole.mapping)
    assert not verdict.feasible and "overlap-param-gather" in {v.rule for v in verdict.verdicts if not v.holds}
    tp2 = inputs(SEED_A.replace("--tensor-model-parallel-size 1", "--tensor-model-parallel-size 2")
                 + " --num-layers 61")
    assert not tp2.problem.training.sequence_parallel
    assert any(n.startswith("no --sequence-parallel: judged without sequence parallelism") for n in tp2.notes)
    sharded = inputs(f"{SEED_A} --num-layers 61 --overlap-param-gather --overlap-grad-reduce "
                     "--use-distributed-optimizer")
    assert sharded.problem.training.distributed_optimizer
    assert "overlap-param-gather" not in {v.rule for v in evaluate(sharded.problem, sharded.mapping).verdicts
                                          if not v.holds}


def test_whole_lines_take_megatrons_option_defaults() -> None:
    """A whole launch line without --moe-grouped-gemm runs Megatron's default (off, transformer_config.py:850), so
    --recompute-modules moe_act breaks recompute-module-prereqs (transformer_config.py:1965-1968) even beside a
    problem whose options say grouped GEMM; judged runnable before, refused by Megatron-LM's config checks (checked
    with the oracle on a Llama 3.1 70B line). The MoE problem notes it; a fragment keeps the problem's options."""
    selective = " --recompute-granularity selective --recompute-modules layernorm moe_act"
    whole = inputs(SEED_A + " --num-layers 61" + selective)
    assert whole.problem.spec.framework.options.moe_grouped_gemm is False
    assert any(n.startswith("no --moe-grouped-gemm: judged without grouped GEMM") for n in whole.notes)
    broken = {v.rule for v in evaluate(whole.problem, whole.mapping).verdicts if not v.holds}
    assert "recompute-module-prereqs" in broken
    grouped = inputs(SEED_A + " --num-layers 61 --moe-grouped-gemm" + selective)
    assert grouped.problem.spec.framework.options.moe_grouped_gemm is True
    assert "recompute-module-prereqs" not in {v.rule for v in evaluate(grouped.problem, grouped.mapping).verdicts
                                              if not v.holds}
    fragment = inputs(SEED_A + selective)
    assert fragment.problem.spec.framework.options.moe_grouped_gemm is True


def test_refused_flags_parasol_does_not_price_are_noted() -> None:
    """Megatron-FSDP without --ckpt-format runs Megatron's default torch_dist (training_config.py:486), which it
    refuses (arguments.py:1169-1170); --overlap-param-gather-with-optimizer-step needs the distributed optimizer,
    --overlap-param-gather and VPP > 1 (arguments.py:1066-1072). Both were judged without a word; the oracle refuses
    both lines."""
    fsdp = inputs(LLAMA_8B + " --use-megatron-fsdp", problem=None, hardware="h100-hgx", gpus=64)
    assert any(n.startswith("no --ckpt-format (Megatron's default torch_dist): this FSDP needs fsdp_dtensor")
               for n in fsdp.notes)
    named = inputs(LLAMA_8B + " --use-megatron-fsdp --ckpt-format fsdp_dtensor", problem=None, hardware="h100-hgx",
                   gpus=64)
    assert not any("--ckpt-format" in n for n in named.notes)
    step = inputs(LLAMA_8B + " --pipeline-model-parallel-size 2 --overlap-param-gather-with-optimizer-step",
                  problem=None, hardware="h100-hgx", gpus=64)
    assert any(n.startswith("--overlap-param-gather-with-optimizer-step needs --overlap-param-gather, an interleaved "
                            "schedule (VPP > 1)") for n in step.notes)
    met = inputs(LLAMA_8B + " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                 "--overlap-grad-reduce --overlap-param-gather --overlap-param-gather-with-optimizer-step",
                 problem=None, hardware="h100-hgx", gpus=64)
    assert not any(n.startswith("--overlap-param-gather-with-optimizer-step needs") for n in met.notes)


def test_flags_megatrons_parser_lacks_are_noted_as_refused() -> None:
    """Flags Megatron-LM main's parser does not define (problems/megatron/megatron_parser_flags.txt) but the
    typo check knows (a config field's name, an older flag): Megatron stops at parsing them (the oracle:
    "unrecognized arguments: --align-param-gather", "--overlap-p2p-communication"), which a note says instead of
    "not modelled"; a flag of main's parser parasol does not read stays not modelled, and a DeepSeek-V4 dev flag
    is not noted."""
    parsed = parse_launch("--tensor-model-parallel-size 2 --align-param-gather --overlap-p2p-communication "
                          "--no-rope-fusion --cp-partition-mode contiguous")
    assert parsed.notes == (
        "--align-param-gather: not an option of Megatron-LM main's parser (an older or a dev-branch flag?); "
        "Megatron-LM main stops at parsing it (unrecognized arguments)",
        "--overlap-p2p-communication: not an option of Megatron-LM main's parser (an older or a dev-branch flag?); "
        "Megatron-LM main stops at parsing it (unrecognized arguments)",
        "not modelled: --no-rope-fusion",
    )


def test_every_recompute_module_megatron_accepts_is_read() -> None:
    """Megatron-LM takes gdn_norm_out, gdp_in_proj and gdp_qkv too (transformer_config.py:1944-1961; the oracle
    accepts gdp_qkv and gdp_in_proj on Llama 3.1 70B): they were bad input (exit 2); now read and noted as not
    priced. gdn_norm_out needs gated DeltaNet blocks (1975-1981): the oracle refuses it on Llama 3.1 70B, and so
    does recompute-module-prereqs. A module Megatron does not know stays an input error that says Megatron
    refuses it too."""
    from parasol.constraints.rules.feature import RecomputeModulePrereqs
    from parasol.problems.options import MegatronOptions

    llama = "problems/llama-3.1-70b-h100-256.yaml"
    line = LLAMA_8B.replace("--num-layers 32", "--num-layers 80") + " --recompute-granularity selective "
    gdp = inputs(line + "--recompute-modules gdp_qkv gdp_in_proj", problem=llama)
    assert gdp.problem.training.recompute_modules == ("gdp_qkv", "gdp_in_proj")
    assert [n for n in gdp.notes if n.startswith("--recompute-modules gdp_qkv gdp_in_proj: accepted by Megatron, "
                                                 "not priced")]
    assert "recompute-module-prereqs" not in {v.rule for v in evaluate(gdp.problem, gdp.mapping).verdicts
                                              if not v.holds}
    norm = inputs(line + "--recompute-modules gdn_norm_out", problem=llama)
    assert "recompute-module-prereqs" in {v.rule for v in evaluate(norm.problem, norm.mapping).verdicts
                                          if not v.holds}
    consts = {"recompute_moe_act": 0, "recompute_mla_up_proj": 0, "recompute_gdn_norm_out": 1,
              "recompute_shared_experts": 0, "recompute_layernorm": 0, "multi_latent_attention": 0, "fp8": 0}
    rule = RecomputeModulePrereqs()
    assert rule.unmet(MegatronOptions(), {**consts, "gdn_value_heads": 32}, "selective") == []
    assert rule.unmet(MegatronOptions(), {**consts, "gdn_value_heads": 0}, "selective") == [
        "gdn_norm_out in recompute_modules is only supported with experimental_attention_variant='gdn' or 'gdn2'."]
    with pytest.raises(InputError, match="Megatron-LM refuses any other"):
        inputs(line + "--recompute-modules mamba", problem=llama)


def test_fp8_delayed_scaling_refuses_layernorm_and_moe_act_recompute() -> None:
    """Under FP8 with delayed scaling (Megatron's default recipe) recomputing layernorm or moe_act is refused
    (transformer_config.py:2000-2005; the oracle refuses a Llama 3.1 70B line with --fp8-format e4m3 and
    --recompute-modules layernorm, which parasol judged runnable); another recipe is accepted."""
    llama = "problems/llama-3.1-70b-h100-256.yaml"
    line = (LLAMA_8B.replace("--num-layers 32", "--num-layers 80")
            + " --fp8-format e4m3 --recompute-granularity selective --recompute-modules layernorm")

    def broken(text: str) -> set[str]:
        ex = inputs(text, problem=llama)
        return {v.rule for v in evaluate(ex.problem, ex.mapping).verdicts if not v.holds}

    assert "recompute-module-prereqs" in broken(line)
    assert "recompute-module-prereqs" not in broken(line + " --fp8-recipe tensorwise")
    assert "recompute-module-prereqs" not in broken(line.replace(" --fp8-format e4m3", ""))


def test_the_older_vpp_flag_is_read_and_noted() -> None:
    """--virtual-pipeline-model-parallel-size, older Megatron's VPP flag, is refused by main's parser (the oracle:
    "unrecognized arguments"); it was listed as not modelled and the line judged at VPP 1. It is read as the VPP it
    meant, with a note that Megatron-LM main stops at it."""
    older = inputs(LLAMA_8B + " --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2",
                   problem=None, hardware="h100-hgx", gpus=64)
    assert older.mapping.vpp == 2
    assert [n for n in older.notes if n.startswith("--virtual-pipeline-model-parallel-size 2: Megatron-LM main does "
                                                   "not take this older flag")]
    current = inputs(LLAMA_8B + " --pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2",
                     problem=None, hardware="h100-hgx", gpus=64)
    assert current.mapping == older.mapping and current.notes == ()


@pytest.mark.slow
def test_explain_json_reflects_the_launch_line() -> None:
    """Issue 3 part 4: the JSON `mapping`, `derived`, `warnings` and `notes` follow the launch line
    (seed 000 A fragment; --moe-enable-deepep is deprecated, transformer_config.py:1743-1752)."""
    data = explain_json(PROBLEM, "--megatron-args", SEED_A + " --moe-enable-deepep --lr 3e-4")
    assert (data["derived"]["dp_attn"], data["derived"]["dp_expert"], data["derived"]["num_microbatches"]) == (128, 2, 32)
    assert data["mapping"]["ep"] == 64
    assert data["notes"] == ["not modelled: --lr 3e-4"]
    assert any(w["rule"] == "megatron-args" and w["flag"] == "--moe-enable-deepep" for w in data["warnings"])
    standalone = explain_json("--hardware", "h100-hgx", "--gpus", "16", "--megatron-args", LLAMA_8B)
    assert standalone["mapping"]["gpus"] == 16 and standalone["derived"]["num_microbatches"] == 8


def test_launch_line_overrides_the_problem_mapping() -> None:
    """Issue 3 part 4: the launch line's flags override the problem's mapping (EP 64 -> 32, CP 1 -> 2)."""
    ex = inputs("--expert-model-parallel-size 32 --context-parallel-size 2")
    assert (ex.mapping.ep, ex.mapping.cp) == (32, 2)
    assert degrees(ex)[1] == 1024 // (8 * 32)


def test_llama_8b_launch_line_reproduces_the_catalog_parameter_count() -> None:
    """reference/model-specs.yaml llama-3.1-8b: the launch line's model has the catalog's 8,030,261,248
    parameters (within 0.1%) once untied embeddings, SwiGLU, no biases, RMSNorm, GQA 8 and vocab are given."""
    parsed = parse_launch(LLAMA_8B)
    assert parsed.model is not None
    catalog = model_params(load_model("llama-3.1-8b")).total
    assert abs(model_params(parsed.model).total / catalog - 1) < 1e-3


def test_llama_8b_without_a_problem_file() -> None:
    """Issue 3 part 4: `explain --hardware PRESET --gpus N --megatron-args` builds the whole run."""
    ex = inputs(LLAMA_8B + " --tensor-model-parallel-size 2 --sequence-parallel", problem=None,
                hardware="h100-hgx", gpus=16)
    m = ex.mapping
    assert (m.gpus, m.tp, m.pp, m.mbs, m.gbs, m.seq_len) == (16, 2, 1, 1, 128, 8192)
    assert degrees(ex)[0] == 8 and degrees(ex)[2] == 16
    assert ex.problem.training.sequence_parallel and ex.problem.training.distributed_optimizer
    assert ex.problem.spec.framework.rule_packs == ("megatron-core",)


def test_megatron_defaults_apply_to_absent_flags() -> None:
    """arguments.py:1320-1333 (ffn 4h, kv_channels h/heads), transformer_config.py:212 (biases on),
    :256 (LayerNorm), :760 (top-k 2), arguments.py:2460 (tied embeddings), argument_utils.py:330-333
    (one KV head per query head without --group-query-attention)."""
    parsed = parse_launch("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
                          "--max-position-embeddings 2048 --vocab-size 32000 --num-experts 8 --seq-length 2048")
    model = parsed.model
    assert model is not None and model.moe is not None
    assert model.moe.top_k == 2
    assert model.moe.expert_intermediate_size == 4 * 1024
    assert model.tied_embeddings is True
    assert model.norm.value == "layernorm"
    assert model.attention.num_kv_heads == 16 and model.attention.head_dim == 64
    assert model.attention.bias is True
    assert model.learned_position_embeddings == 2048
    assert model.vocab_size == 32000  # already a multiple of 128 · TP1


def test_swiglu_default_ffn_and_vocab_padding() -> None:
    """arguments.py:1320-1327: SwiGLU ffn defaults to int(8h/3 / 64)·64; build_tokenizer.py:133-146 pads
    the vocabulary to a multiple of 128·TP."""
    parsed = parse_launch("--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --swiglu "
                          "--max-position-embeddings 4096 --vocab-size 50257 --tensor-model-parallel-size 4")
    assert parsed.model is not None and parsed.model.dense_mlp is not None
    assert parsed.model.dense_mlp.intermediate_size == 10880
    assert parsed.model.vocab_size == 50688


def test_missing_vocab_is_a_stated_default_and_a_warning() -> None:
    """Issue 3 part 4: without --padded-vocab-size/--vocab-size parasol states its default and warns."""
    parsed = parse_launch("--num-layers 2 --hidden-size 512 --num-attention-heads 8 --max-position-embeddings 512")
    assert parsed.model is not None and parsed.model.vocab_size == 50304
    assert [w.flag for w in parsed.warnings] == ["--vocab-size"]


def test_script_with_backslash_continuations(tmp_path) -> None:
    """Issue 3 part 4: a launch script with torchrun, backslash continuations and variables reads like
    the one-line form; torchrun's --nproc_per_node × --nnodes gives the GPU count."""
    script = tmp_path / "launch.sh"
    script.write_text(
        "#!/bin/bash\n"
        "# seed 000 configuration A\n"
        "NODES=128\n"
        "EP=64\n"
        "torchrun --nproc_per_node 8 --nnodes $NODES pretrain_gpt.py \\\n"
        "    --tensor-model-parallel-size 1 \\\n"
        "    --pipeline-model-parallel-size 8 \\\n"
        "    --expert-model-parallel-size ${EP} \\\n"
        "    --expert-tensor-parallel-size 1 \\\n"
        "    --micro-batch-size 1 --global-batch-size 4096 \\\n"
        "    --save ${CHECKPOINT_DIR:-/ckpt} 2>&1 | tee train.log\n", encoding="utf-8")
    ex = explain_inputs(PROBLEM, (), (script.read_text(encoding="utf-8"), str(script)))
    assert degrees(ex) == (128, 2, 32)
    assert ex.notes == ("not modelled: --save /ckpt",)
    assert parse_launch(script.read_text(encoding="utf-8")).launcher_gpus == 1024
    script.write_text(script.read_text(encoding="utf-8").replace("--micro-batch-size 1", "--micro-batch-size x"),
                      encoding="utf-8")
    bad = run("explain", PROBLEM, "--megatron-args-file", str(script))
    assert bad.exit_code == 2 and "--micro-batch-size" in bad.output


def test_script_with_bash_arrays(tmp_path) -> None:
    """Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh style: flags in NAME=( … ) arrays
    expanded as ${NAME[@]}, with comments inside the arrays."""
    text = (
        "MODEL_ARGS=(\n    --num-layers 96  # GPT-3 175B (see the paper)\n    --hidden-size 12288\n"
        "    --num-attention-heads 96\n    --seq-length 2048\n    --max-position-embeddings 2048\n)\n"
        "PAR=(\n\t--tensor-model-parallel-size 8\n\t--pipeline-model-parallel-size 16\n)\n"
        "PAR+=(--fp16)\n"
        "torchrun ${DIST[@]} pretrain_gpt.py \\\n    ${MODEL_ARGS[@]} \\\n    ${PAR[@]}\n")
    parsed = parse_launch(text)
    assert parsed.mapping_fields == {"tp": 8, "pp": 16, "seq_len": 2048}
    assert parsed.model is not None and parsed.model.num_layers == 96
    assert parsed.training_fields["precision"] == "bf16"


def test_script_with_shell_arithmetic() -> None:
    """Megatron-LM examples/gptoss/02_train.sh style: WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES)) and
    PP_SIZE=${WORLD_SIZE}; `$(( … ))` reads `$NAME`s and bare names, and `/` and `%` truncate toward zero
    as bash's do (bash: $((-7/2)) is -3, $((-7%2)) is -1)."""
    text = ("GPUS_PER_NODE=8\nNUM_NODES=2\nGPUS_PER_NODE=${GPUS_PER_NODE:-8}\n"
            "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))\nPP_SIZE=${WORLD_SIZE}\nHALF=$(( (WORLD_SIZE + 2) / 4 ))\n"
            "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\\n"
            "    --pipeline-model-parallel-size ${PP_SIZE} --tensor-model-parallel-size $((HALF - 2)) \\\n"
            "    --context-parallel-size $(( -7 / 2 + 4 )) --micro-batch-size $((-7 % 2 + 3))\n")
    parsed = parse_launch(text)
    assert parsed.mapping_fields == {"pp": 16, "tp": 2, "cp": 1, "mbs": 2}
    assert parsed.launcher_gpus == 16


def test_variables_before_the_command_are_its_environment() -> None:
    """`NAME=value torchrun …` (CUDA_DEVICE_MAX_CONNECTIONS=1 as Megatron-LM's examples need it) is the command
    with those variables in its environment, not an assignment that swallows the line (it was "No Megatron-LM
    flags found"); the command's own `$NAME`s expand before the prefix takes effect, as bash's do; `TP=2 PP=4`
    on one line assigns both."""
    text = ("GPUS=4\nTP=2 PP=4\nCUDA_DEVICE_MAX_CONNECTIONS=1 GPUS=8 NCCL_DEBUG=\"INFO x\" torchrun --nproc_per_node "
            "$GPUS pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n")
    parsed = parse_launch(text)
    assert parsed.mapping_fields == {"tp": 2, "pp": 4}
    assert parsed.launcher_gpus == 4
    assert parse_launch("NVTE_FUSED_ATTN=1 --tensor-model-parallel-size 8").mapping_fields == {"tp": 8}


def test_the_command_environment_is_the_exported_variables_and_its_prefix() -> None:
    """`export A=1 B=2` assigns and exports both, `export NAME` exports an assigned one, a plain assignment is
    not exported, and the command's own prefix wins (what Hybrid-EP's NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN
    is read from)."""
    text = ("export A=1 B=2\nC=3\nD=4\nexport D\nB=5 E=6 torchrun --nproc_per_node $A pretrain_gpt.py "
            "--tensor-model-parallel-size $C\n")
    command = launch_command(text)
    assert dict(command.environment) == {"A": "1", "B": "5", "D": "4", "E": "6"}
    assert command.launcher == ("torchrun", "--nproc_per_node", "1") and command.words[-1] == "3"
    other = launch_command("local x\ndeclare -a ARR\nlocal Z=3\nNCCL_DEBUG=INFO python pretrain_gpt.py "
                           "--moe-layer-freq=([0]*3+[1]*58) --tensor-model-parallel-size $Z\n")
    assert other.words == ("--moe-layer-freq=([0]*3+[1]*58)", "--tensor-model-parallel-size", "3")
    assert dict(other.environment) == {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize("launcher, gpus, per_node", [
    ("torchrun --nproc_per_node=8 --nnodes=4", 32, 8),
    ("srun --nodes 2 --ntasks-per-node 8 python", 16, 8),
    ("srun -N4 --ntasks-per-node=8 python", 32, 8),
    ("srun --ntasks 64 python -u", 64, None),
    ("srun -N 2 torchrun --nproc-per-node 4 --nnodes 2", 8, 4),
    ("mpirun -np 16 --npernode 8 python", 16, 8),
    ("mpiexec -n 8 python", 8, None),
    ("srun python", None, None),
    ("torchrun --nproc_per_node 8 --nnodes 1:4", None, None),
])
def test_ranks_the_launcher_starts(launcher: str, gpus: int | None, per_node: int | None) -> None:
    """The GPU count a launch line alone implies (one rank per GPU): torchrun's --nproc_per_node × --nnodes (it
    wins when srun starts it on each node), Slurm srun's --ntasks or --ntasks-per-node × --nodes, Open MPI's -np;
    none when the launcher does not say or says it in words that are not numbers (an elastic 1:4)."""
    parsed = parse_launch(f"{launcher} pretrain_gpt.py --tensor-model-parallel-size 2")
    assert (parsed.launcher_gpus, parsed.launcher_ranks_per_node) == (gpus, per_node)


def test_srun_starts_its_tasks_in_the_sbatch_allocation() -> None:
    """A Slurm batch script's `#SBATCH --nodes` and `--ntasks-per-node` (Megatron-LM
    examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh's form) give srun's rank count when srun names none, its own
    options winning; words that are not numbers (that script's your_own_num_nodes) leave the count unknown."""
    script = ("#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --nodes=16  # whole racks\n#SBATCH --ntasks-per-node=8\n"
              "srun {} python pretrain_gpt.py --tensor-model-parallel-size 2\n")
    counts = [(p.launcher_gpus, p.launcher_ranks_per_node)
              for p in (parse_launch(script.format(options)) for options in ("", "-N 2", "--ntasks 32"))]
    assert counts == [(128, 8), (16, 8), (32, 8)]
    assert parse_launch(script.format("").replace("16", "your_own_num_nodes")).launcher_gpus is None


def test_the_slurm_segment_size() -> None:
    """`#SBATCH --segment=16` (Slurm's block topology: each piece of the allocation within one block), srun's own
    --segment winning; none when absent or not a number."""
    script = "#!/bin/bash\n#SBATCH --nodes=32\n#SBATCH --segment=16\nsrun {} python pretrain_gpt.py --tensor-model-parallel-size 2\n"
    assert [launch_command(script.format(o)).segment_nodes for o in ("", "--segment 8", "--segment=x")] == [16, 8, None]
    assert launch_command("torchrun pretrain_gpt.py --tensor-model-parallel-size 2").segment_nodes is None


def test_defaults_that_assign_and_empty_values() -> None:
    """Bash's defaults: `${X:=d}` (also as `: ${X:=d}`) assigns d when X is unset or empty, `${X-d}` keeps an
    empty X and `${X:-d}` does not."""
    text = (": ${TP:=4}\nEMPTY=\nPP=${EMPTY:-2}\nCP=${UNSET=1}\nMBS=${EMPTY-3}2\n"
            "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
            "--context-parallel-size $CP --micro-batch-size $MBS --expert-model-parallel-size ${UNSET}\n")
    assert parse_launch(text).mapping_fields == {"tp": 4, "pp": 2, "cp": 1, "mbs": 2, "ep": 1}


@pytest.mark.parametrize("expression", ["$((UNSET * 2))", "$((TP ** 2))", "$((TP / 0))", "$((TP << 1))",
                                        "$((WORDS + 1))"])
def test_shell_arithmetic_it_cannot_read_names_the_expression(expression: str) -> None:
    """An unknown or non-integer variable, division by zero or an operator beyond + - * / % leaves the
    expression unresolved: a modelled flag that reads it is an error naming it, never a guessed value."""
    with pytest.raises(InputError, match=re.escape(expression)):
        parse_launch(f"TP=2\nWORDS=two\ntorchrun pretrain_gpt.py --tensor-model-parallel-size {expression}\n")


@pytest.mark.parametrize("program", ["pretrain_vlm.py", "examples/multimodal/train.py"])
def test_flags_a_program_of_its_own_may_add_are_notes(program: str) -> None:
    """Megatron-LM pretrain_vlm.py (add_vlm_extra_args) and examples/multimodal/train.py add flags of their own
    (extra_args_provider): a flag arguments.py lacks is then a note naming the program, not Megatron's refusal,
    and the model the flags describe is explained with a note on what the program adds; pretrain_gpt.py's parser is
    arguments.py's alone, so there the same flag is refused."""
    line = (f"torchrun {program} --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
            "--max-position-embeddings 512 --freeze-ViT")
    parsed = parse_launch(line)
    assert any(n.startswith("--freeze-ViT:") and program in n for n in parsed.notes)
    assert any(n.startswith(f"{program} is not one of the Megatron-LM programs") for n in parsed.notes)
    with pytest.raises(InputError, match="unrecognized arguments: --freeze-ViT"):
        parse_launch(line.replace(program, "/workspace/Megatron-LM/pretrain_gpt.py"))


def test_unknown_flags_are_reported_not_dropped() -> None:
    """Issue 3 part 4: flags parasol does not model are kept as 'not modelled' notes, in order."""
    ex = inputs(SEED_A + " --lr 3e-4 --use-flash-attn --split 99,1,0")
    assert ex.notes == ("not modelled: --lr 3e-4", "not modelled: --use-flash-attn", "not modelled: --split 99,1,0")


@pytest.mark.parametrize("line, flag", [
    ("--tensor-model-parallel-size two", "--tensor-model-parallel-size"),
    ("--pipeline-model-parallel-size 0", "--pipeline-model-parallel-size"),
    ("--moe-token-dispatcher-type deepep", "--moe-token-dispatcher-type"),
    ("--sequence-parallel yes", "--sequence-parallel"),
    ("--micro-batch-size", "--micro-batch-size"),
    ("--moe-layer-freq __import__('os')", "--moe-layer-freq"),
])
def test_malformed_values_exit_2_with_one_paragraph(line: str, flag: str) -> None:
    """Issue 3 part 4: a malformed value is an InputError naming the flag: exit 2, no traceback."""
    result = run("explain", PROBLEM, "--megatron-args", line)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert flag in result.output
    assert result.output.strip().count("\n") == 0


def test_set_that_contradicts_the_launch_line_is_an_error() -> None:
    """Issue 3 part 4: a --set and a launch flag that disagree give exit 2; agreeing ones are fine."""
    bad = run("explain", PROBLEM, "--set", "ep=32", "--megatron-args", SEED_A)
    assert bad.exit_code == 2 and "--expert-model-parallel-size" in bad.output
    assert inputs(SEED_A, "ep=64", "vpp=1").mapping.ep == 64


def test_unresolved_variable_in_a_modelled_flag_names_it() -> None:
    """A modelled flag whose value is an unknown shell variable is an error naming the variable; the
    same in an unmodelled flag is only a note."""
    with pytest.raises(InputError, match=r"\$TP"):
        parse_launch("--tensor-model-parallel-size $TP")
    parsed = parse_launch("--data-path ${DATA}")
    assert parsed.notes == ("not modelled: --data-path $DATA",)


def test_qkv_bias_flag_gives_qwen25_counts() -> None:
    """Megatron's Qwen2.5 line (--disable-bias-linear --add-qkv-bias: transformer_config.py add_qkv_bias, biases on
    the QKV projection alone) describes Qwen2.5-7B: 7,615,616,512 parameters, as its HF config gives
    (tests/test_hf_config.py)."""
    parsed = parse_launch(
        "--num-layers 28 --hidden-size 3584 --ffn-hidden-size 18944 --num-attention-heads 28 "
        "--group-query-attention --num-query-groups 4 --swiglu --normalization RMSNorm --disable-bias-linear "
        "--add-qkv-bias --untie-embeddings-and-output-weights --position-embedding-type rope "
        "--max-position-embeddings 131072 --padded-vocab-size 152064")
    assert parsed.model is not None and model_params(parsed.model).total == 7_615_616_512


LLAMA_8B_LINE = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
                 "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm --disable-bias-linear "
                 "--untie-embeddings-and-output-weights --position-embedding-type rope --seq-length 8192 "
                 "--max-position-embeddings 8192 --padded-vocab-size 128256 --bf16 --tensor-model-parallel-size 2 "
                 "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 128 "
                 "--recompute-granularity full ")


@pytest.mark.parametrize("method, says", [
    ("block --recompute-num-layers 4", "its peak memory is a lower bound and its step time an upper bound"),
    ("uniform --recompute-num-layers 2", "a checkpoint per layer where Megatron keeps one per run"),
    ("uniform --recompute-num-layers 1", None),
])
def test_a_recompute_method_parasol_does_not_price_is_said(method: str, says: str | None) -> None:
    """Megatron-LM megatron/core/recompute.py:157-178: `block` recomputes only the first N layers of each virtual
    stage, `uniform` recomputes runs of N layers at once; parasol prices uniform over 1 layer, so explain says
    how the other two differ (a note on screen and in the JSON, and a memory-ledger assumption) and says nothing
    for uniform over 1."""
    args = ("--megatron-args", LLAMA_8B_LINE + "--recompute-method " + method, "--hardware", "h100-hgx", "--gpus", "16")
    data = explain_json(*args)
    notes = [n for n in data["notes"] if n.startswith("recompute method")]
    screen = [line for line in run("explain", *args).output.splitlines() if line.startswith("note: recompute method")]
    if says is None:
        assert notes == [] and screen == []
        return
    assert len(notes) == 1 and says in notes[0] and len(screen) == 1
    assert any(says in a for a in data["assumptions"])


def test_moe_layer_freq_list_form_without_eval() -> None:
    """arguments.py:327-350 and gpt_layer_specs.py:643-660: an int N puts an MoE layer every N layers;
    the list form such as ([0]*3+[1]*58) gives one 0/1 per layer."""
    assert parse_layer_freq("([0]*3+[1]*58)") == [0] * 3 + [1] * 58
    assert parse_layer_freq("[0,1]*2+[1]") == [0, 1, 0, 1, 1]
    assert parse_layer_freq("2") == 2
    assert moe_pattern(2, 5) == [1, 0, 1, 0, 1]
    with pytest.raises(InputError, match="moe-layer-freq"):
        parse_layer_freq("[0]*3+2")
    with pytest.raises(InputError, match="moe_layer_pattern"):
        moe_pattern([0, 1, 1], 4)


def test_moe_model_with_leading_dense_layers() -> None:
    """DeepSeek-V3-style launch line (Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh):
    3 dense then 58 MoE blocks, MLA, top-8 of 256 with one shared expert of 2048, MTP 1."""
    parsed = parse_launch(
        "--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 "
        "--max-position-embeddings 4096 --position-embedding-type rope --normalization RMSNorm --swiglu "
        "--untie-embeddings-and-output-weights --multi-latent-attention --disable-bias-linear "
        "--num-experts 256 --moe-layer-freq ([0]*3+[1]*58) --moe-ffn-hidden-size 2048 "
        "--moe-shared-expert-intermediate-size 2048 --moe-router-topk 8 --moe-router-enable-expert-bias "
        "--q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 "
        "--mtp-num-layers 1 --padded-vocab-size 129280")
    model = parsed.model
    assert model is not None and model.moe is not None
    assert (model.first_dense_layers, model.num_moe_layers, model.moe.top_k) == (3, 58, 8)
    assert model.attention.kind == "mla" and model.mtp_layers == 1
    reference = model_params(load_model("deepseek-v3")).total
    assert abs(model_params(model).total / reference - 1) < 1e-3


def test_hybrid_pattern_segments_are_the_pipeline_stages() -> None:
    """megatron-groups.md §2.3 and §3: `|` segments of --hybrid-layer-pattern are the virtual stages
    (vpp = segments / PP); C/H/W are DeepSeek-V4 CSA/HCA/window blocks and switch on the deepseek-v4 pack."""
    problem = load_problem(PROBLEM)
    ratios = problem.model.attention.compress_ratios[:problem.model.num_layers]
    symbol = {4: "C", 128: "H", 0: "W"}
    blocks = [symbol[r] + "E" for r in ratios]
    counts = (4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1)
    segments, at = [], 0
    for n in counts:
        segments.append("".join(blocks[at:at + n]))
        at += n
    pattern = "|".join(segments)
    assert parse_hybrid_pattern(pattern).segments == counts
    parsed = parse_launch(f"--pipeline-model-parallel-size 8 --hybrid-layer-pattern {pattern}", model=problem.model)
    assert parsed.deepseek_v4 and parsed.mapping_fields["vpp"] == 2
    assert parsed.mapping_fields["layout"] == counts
    assert parsed.options.hybrid_layer_pattern == pattern
    assert parsed.notes == ()
    _, mapping, _ = apply_launch(problem, parsed, {})
    assert mapping.layout == counts and mapping.vpp == 2


def test_layout_string_and_uneven_first_last_stages() -> None:
    """Megatron pipeline_parallel_layer_layout.py and transformer_config.py:2294-2368: a layout string
    gives the stage counts; --decoder-first/last-pipeline-num-layers split the rest evenly."""
    model = load_problem(PROBLEM).model
    parsed = parse_launch("--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout "
                          "Et*7|(tttttttt|)*6t*6,mL", model=model)
    assert parsed.mapping_fields["layout"] == (7, 8, 8, 8, 8, 8, 8, 6)
    uneven = parse_launch("--pipeline-model-parallel-size 8 --decoder-first-pipeline-num-layers 7 "
                          "--decoder-last-pipeline-num-layers 6", model=model)
    assert uneven.mapping_fields["layout"] == (7, 8, 8, 8, 8, 8, 8, 6)
    with_vpp = parse_launch("--num-layers 30 --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
                            "--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 8")
    assert with_vpp.mapping_fields["layout"] == (3, 4, 4, 4, 3, 4, 4, 4)
    odd = parse_launch("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
                       "--decoder-first-pipeline-num-layers 15 --decoder-last-pipeline-num-layers 16", model=model)
    assert "layout" not in odd.mapping_fields  # 61 blocks cannot give every rank an even count: rules judge it


def test_two_sources_of_virtual_stages_are_carried_for_the_rules() -> None:
    """Rule vpp-args-mutually-exclusive (arguments.py:927-939) judges two virtual-stage flags, so the launch
    reader keeps both values (VPP from the layers per virtual stage: 16/4/2)."""
    parsed = parse_launch("--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 3 "
                          "--num-layers-per-virtual-pipeline-stage 2 --num-layers 16")
    assert parsed.mapping_fields["vpp"] == 2
    assert (parsed.options.num_virtual_stages_per_pipeline_rank, parsed.options.num_layers_per_virtual_pipeline_stage) \
        == (3, 2)


def test_a_virtual_stage_flag_beside_a_segmented_hybrid_pattern_is_refused() -> None:
    """arguments.py:814-838: a hybrid pattern with `|` segments sets the virtual stages itself."""
    with pytest.raises(InputError, match="cannot be set together"):
        parse_launch("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                     "--hybrid-layer-pattern M*|M*|M*|M*")


def test_rewritten_and_deprecated_flags() -> None:
    """arguments.py:607-609 (--recompute-activations is selective), transformer_config.py:1743-1752
    (--moe-enable-deepep deprecated, deepep backend) and :2014-2025 (--moe-layer-recompute adds 'moe')."""
    ex = inputs(SEED_A + " --recompute-activations --moe-enable-deepep")
    assert ex.mapping.recompute == "selective"
    assert [w.flag for w in ex.warnings] == ["--moe-enable-deepep"]
    assert ex.problem.spec.framework.options.moe_flex_dispatcher_backend == "deepep"
    parsed = parse_launch("--moe-layer-recompute --recompute-modules moe_act")
    assert parsed.mapping_fields["recompute"] == "selective"
    assert parsed.training_fields["recompute_modules"] == ("moe_act", "moe")
    assert parsed.options.moe_layer_recompute and parsed.options.recompute_activations is False


def test_options_only_override_what_the_line_sets() -> None:
    """Issue 3 part 4: flags override the problem's options; absent flags keep the problem's values."""
    problem = load_problem(PROBLEM)
    parsed = parse_launch("--moe-token-dispatcher-type alltoall --no-overlap-p2p-communication", model=problem.model)
    updated, _, _ = apply_launch(problem, parsed, {})
    options = updated.spec.framework.options
    assert options.moe_token_dispatcher_type == "alltoall" and options.overlap_p2p_comm is False
    assert options.cp_partition_mode == "contiguous"


def test_no_problem_file_uses_megatron_training_defaults() -> None:
    """Without a problem file: GBS defaults to MBS·DP (rule gbs-default), no distributed optimizer and no
    SP unless flagged (arguments.py), biases on (transformer_config.py:212)."""
    parsed = parse_launch(LLAMA_8B.replace("--global-batch-size 128 ", "").replace(" --use-distributed-optimizer", ""))
    problem, mapping, notes = launch_problem(parsed, hardware="h100-hgx", gpus=16)
    assert mapping.gbs == 16
    assert problem.training.distributed_optimizer is False and problem.training.sequence_parallel is False
    assert problem.spec.framework.options.add_bias_linear is False  # --disable-bias-linear was given
    assert any("gbs-default" in n for n in notes)


def test_no_problem_file_needs_model_flags_or_a_catalog_model() -> None:
    """Without a problem file the model comes from the flags, or --model NAME."""
    missing = run("explain", "--hardware", "h800-hgx", "--gpus", "1024", "--megatron-args", SEED_A)
    assert missing.exit_code == 2 and "--num-layers" in missing.output
    ex = inputs(SEED_A + " --seq-length 8192", problem=None, hardware="h800-hgx", gpus=1024,
                model_name="deepseek-v4-pro")
    assert degrees(ex) == (128, 2, 32)
    assert "deepseek-v4" in ex.problem.spec.framework.rule_packs
    with_file = run("explain", PROBLEM, "--gpus", "8", "--megatron-args", SEED_A)
    assert with_file.exit_code == 2 and "--gpus" in with_file.output


def test_model_flags_with_a_problem_file_are_compared_not_used() -> None:
    """Issue 3 part 4: with a problem file its model is used; the launch line's model flags are compared
    with it (differences noted) instead of being reported as not modelled. A line naming its model is a
    whole launch line: without --use-distributed-optimizer Megatron runs without it, and so is it judged; likewise
    biases on the linear layers and no grouped GEMM (Megatron's defaults, transformer_config.py:212-214, 850)."""
    ex = inputs("--num-layers 60 --hidden-size 7168 --swiglu --moe-router-topk 6 --pipeline-model-parallel-size 8")
    assert ex.problem.model.name == "deepseek-v4-pro"
    assert not ex.problem.training.distributed_optimizer
    options = ex.problem.spec.framework.options
    assert options.add_bias_linear and not options.moe_grouped_gemm
    assert ex.notes == (
        "no --use-distributed-optimizer: judged without the distributed optimizer, as Megatron runs this whole "
        "launch line (the problem's training.distributed_optimizer is true)",
        "no --disable-bias-linear: judged with biases on the linear layers, as Megatron runs this whole launch line "
        "(the problem's framework.options.add_bias_linear is false)",
        "no --moe-grouped-gemm: judged without grouped GEMM, as Megatron runs this whole launch line (the problem's "
        "framework.options.moe_grouped_gemm is true)",
        "--num-layers 60 differs from the problem's model (deepseek-v4-pro: 61); the problem's model is used",
        "model flags compared with the problem's model deepseek-v4-pro, which is used: --num-layers 60, "
        "--hidden-size 7168, --swiglu, --moe-router-topk 6",
    )
