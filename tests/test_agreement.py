"""Property test: every active rule's Python verdict equals its CP-SAT verdict on random mappings.

Source: the BRIEF (a constraint evaluates a mapping in plain Python and posts itself into CP-SAT
behind one literal; "(a) and (b) must agree on every mapping: a property test holds them together");
rule ids and conditions from reference/megatron-rules.yaml.

For each seeded random, fully specified mapping (degrees drawn from small sets that include invalid
values, explicit layouts valid and broken, Megatron flags and training switches redrawn from their
types, so that flag rules meet both verdicts) on five problems, the
CP-SAT model pins every degree (single-value domains) and holds every active rule behind its
literal (iterating constraints.registry.active_constraints, so rules added later are covered). The
rules whose Python slack is >= 0 must be satisfiable together (which implies each one alone), and
each rule with slack < 0 must be infeasible with its literal forced true. The verdict is `holds`:
a warning (a flag Megatron rewrites) never rejects a mapping, on either side. Rules Python cannot
judge (a memory rule without a covering layout) are left out on both sides.
"""

from __future__ import annotations

import random
from dataclasses import replace
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

import pytest
from inline_problems import SMALL_MOE
from ortools.sat.python import cp_model

from parasol.constraints.core.base import Severity
from parasol.constraints.evaluate import facts_for
from parasol.constraints.rules.registry import active_constraints
from parasol.problems.loader import Problem, load_problem, load_problem_text
from parasol.problems.mapping import Mapping, Recompute
from parasol.problems.options import MegatronOptions
from parasol.solver.diagnose.compile import CompiledRules, compile_rules, fixed_domains
from parasol.solver.search.cpsat import DIAGNOSIS_LIMIT_S, deterministic_solver

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
MAPPINGS_PER_PROBLEM = 500

LLAMA = """
name: dense-llama-inline
model:
  name: llama-like-inline
  hidden_size: 4096
  vocab_size: 128256
  num_layers: 32
  attention: {kind: gqa, num_heads: 32, num_kv_heads: 8, head_dim: 128}
  dense_mlp: {intermediate_size: 14336, activation: swiglu}
training: {seq_len: 8192, global_batch: 512, precision: bf16, optimizer: adam, recompute: none}
hardware: {preset: h100-hgx, gpus: 128}
framework: {rule_packs: [megatron-core]}
"""

HYBRID = """
name: hybrid-mamba-inline
model:
  name: hybrid-inline
  hidden_size: 1024
  vocab_size: 32000
  num_layers: 12
  layer_pattern: "MEM*EM-ME*EM"
  attention: {kind: gqa, num_heads: 16, num_kv_heads: 4, head_dim: 64, sliding_window: 512}
  mamba: {num_heads: 32, head_dim: 64, state_size: 64, num_groups: 4}
  dense_mlp: {intermediate_size: 4096, activation: squared_relu}
  moe: {num_experts: 16, top_k: 2, expert_intermediate_size: 512, activation: squared_relu, latent_size: 256}
training: {seq_len: 4096, global_batch: 256, precision: bf16, optimizer: adam, recompute: none}
hardware: {preset: h100-hgx, gpus: 64}
framework: {rule_packs: [megatron-core]}
"""


FLIP = 0.12
SMALL_INTS = (1, 2, 3, 4, 8)
MODULE_NAMES = ("core_attn", "attn_proj", "qkv_linear", "expert_fc1", "moe_act", "mlp", "moe", "layernorm",
                "mla_up_proj", "shared_experts", "mhc")
KEPT_TRAINING = ("seq_len", "global_batch", "micro_batch", "recompute", "workspace_gb", "dispatch_headroom")

def _problems() -> dict[str, Problem]:
    """The two bundled DeepSeek-V4-Pro problems, a dense Llama, a small MoE and a small hybrid Mamba model
    (local attention, LatentMoE) written inline."""
    return {
        "v4-1024": load_problem(PROBLEMS / "deepseek-v4-pro-1024.yaml"),
        "v4-8192": load_problem(PROBLEMS / "deepseek-v4-pro-8192.yaml"),
        "llama-dense": load_problem_text(LLAMA, source="llama-inline.yaml"),
        "small-moe": load_problem_text(SMALL_MOE, source="small-moe-inline.yaml"),
        "hybrid-mamba": load_problem_text(HYBRID, source="hybrid-inline.yaml"),
    }


def random_layout(rng: random.Random, blocks: int, stages: int) -> tuple[int, ...] | None:
    """Mostly the default split; sometimes an explicit cut over `stages`, now and then a broken one."""
    roll = rng.random()
    if roll < 0.7 or stages > blocks:
        return None
    cuts = sorted(rng.sample(range(1, blocks), stages - 1)) if stages > 1 else []
    layout = [b - a for a, b in zip([0, *cuts], [*cuts, blocks], strict=True)]
    if roll > 0.9:
        layout[0] += rng.choice((-1, 1)) if layout[0] > 0 else 1
    if roll > 0.95:
        layout.append(1)
    return tuple(layout)


def random_mapping(rng: random.Random, problem: Problem) -> Mapping:
    """A fully specified mapping with degrees from small sets, invalid values included."""
    gpus = problem.gpus
    gbs = problem.training.global_batch
    seq = problem.training.seq_len
    pp = rng.choice((1, 2, 3, 4, 8, 16))
    vpp = rng.choice((1, 1, 2, 3, 4))
    num_layers = problem.model.num_layers
    return Mapping(
        gpus=rng.choice((gpus, gpus, gpus // 2, gpus * 3 // 4)),
        tp=rng.choice((1, 1, 2, 3, 4, 8)),
        pp=pp,
        cp=rng.choice((1, 1, 2, 4, 8)),
        ep=rng.choice((1, 2, 4, 5, 6, 8, 16, 32, 64, 128, 256)),
        etp=rng.choice((None, None, 1, 2, 4)),
        vpp=vpp,
        mbs=rng.choice((1, 1, 2, 3, 4)),
        gbs=rng.choice((gbs, gbs, gbs // 2, gbs * 2, gbs + 8, gbs // 8, 96, 1000)),
        seq_len=rng.choice((seq, seq, seq // 2, 6000, 127)),
        recompute=rng.choice(tuple(Recompute)),
        layout=random_layout(rng, num_layers, pp * vpp),
    )


def random_value(rng: random.Random, annotation: object, default: object) -> object:
    """A value of a pydantic field's type (bool, Literal, enum, small int, tuple, optional); the default
    for types the generator does not know (free text, floats)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return random_value(rng, args[0], default)
    if origin in (Union, UnionType):
        options = [a for a in args if a is not type(None)]
        return None if type(None) in args and rng.random() < 0.4 else random_value(rng, options[0], default)
    if origin is Literal:
        return rng.choice(args)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return rng.choice(list(annotation))
    if annotation is bool:
        return rng.random() < 0.5
    if annotation is int:
        return rng.choice(SMALL_INTS)
    if origin is tuple:
        return random_tuple(rng, args)
    return default


def random_tuple(rng: random.Random, args: tuple) -> tuple:
    """A short tuple for a tuple[...] field: module names for strings, small ints otherwise."""
    item = get_args(args[0])[0] if get_origin(args[0]) is Annotated else args[0]
    if get_origin(item) is Literal:
        return tuple(rng.sample(get_args(item), k=min(2, len(get_args(item)))))
    if item is str:
        return tuple(rng.sample(MODULE_NAMES, k=rng.choice((0, 1, 2))))
    length = len(args) if Ellipsis not in args else rng.choice((1, 2))
    return tuple(rng.choice(SMALL_INTS) for _ in range(length))


def shuffled_fields(rng: random.Random, value, skip: tuple[str, ...] = ()):  # noqa: ANN001, ANN201
    """A copy of a pydantic value with about FLIP of its fields redrawn from their types."""
    update = {}
    for name, info in type(value).model_fields.items():
        if name not in skip and rng.random() < FLIP:
            update[name] = random_value(rng, info.annotation, getattr(value, name))
    return value.model_copy(update=update)


def random_layout_string(rng: random.Random, problem: Problem) -> str:
    """A --pipeline-model-parallel-layout string (E first, L last, t blocks; broken now and then)."""
    stages = rng.choice((2, 4, 8))
    layout = random_layout(rng, problem.model.num_layers, stages) or (problem.model.num_layers,)
    return "E" + "|".join(f"t*{n}" if n else "" for n in layout) + ("L" if rng.random() < 0.9 else "")


def random_setting(rng: random.Random, problem: Problem) -> tuple[Problem, MegatronOptions]:
    """The problem with some training switches and Megatron flags redrawn (every field any rule may
    read, so that rules added later meet both of their verdicts)."""
    options = shuffled_fields(rng, problem.spec.framework.options,
                              skip=("pipeline_model_parallel_layout", "hybrid_layer_pattern"))
    if rng.random() < 0.1:
        options = options.model_copy(update={"pipeline_model_parallel_layout": random_layout_string(rng, problem)})
    if rng.random() < 0.5:
        return problem, options
    training = shuffled_fields(rng, problem.training, skip=KEPT_TRAINING)
    return replace(problem, spec=problem.spec.model_copy(update={"training": training})), options


def satisfiable(compiled: CompiledRules, rule_ids: list[str]) -> bool:
    """Whether the pinned model holds with the literals of `rule_ids` forced true."""
    compiled.model.ClearAssumptions()
    compiled.model.AddAssumptions([compiled.literals[r] for r in rule_ids])
    status = deterministic_solver(DIAGNOSIS_LIMIT_S, presolve=False).Solve(compiled.model)
    assert status != cp_model.MODEL_INVALID, compiled.model.Validate()
    return status in (cp_model.OPTIMAL, cp_model.FEASIBLE)


def disagreements(problem: Problem, mapping: Mapping, options: MegatronOptions) -> list[str]:
    """Rule ids whose Python verdict (Verdict.holds) differs from CP-SAT's on `mapping`."""
    facts = facts_for(problem, mapping, options)
    rules = [r for r in active_constraints(problem) if facts.ledger is not None or not r.needs_ledger()]
    holds = {r.id: r.severity is Severity.warning or r.slack(facts) >= 0 for r in rules}
    compiled = compile_rules(problem, rules, fixed_domains(mapping), options, fixed=mapping)
    holding = [r for r, ok in holds.items() if ok]
    wrong = [r for r, ok in holds.items() if not ok and satisfiable(compiled, [r])]
    if not satisfiable(compiled, holding):
        wrong += [r for r in holding if not satisfiable(compiled, [r])] or ["<holding rules jointly infeasible>"]
    return wrong


@pytest.fixture(scope="module")
def problems() -> dict[str, Problem]:
    return _problems()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["v4-1024", "v4-8192", "llama-dense", "small-moe", "hybrid-mamba"])
def test_every_rule_agrees_on_random_mappings(problems: dict[str, Problem], name: str) -> None:
    """BRIEF: Python and CP-SAT verdicts agree for every active rule on 500 seeded random mappings per
    problem (2,500 in all), invalid degrees, broken layouts and redrawn flags included."""
    problem = problems[name]
    rng = random.Random(f"agreement-{name}")
    failures = []
    for _ in range(MAPPINGS_PER_PROBLEM):
        variant, options = random_setting(rng, problem)
        mapping = random_mapping(rng, variant)
        wrong = disagreements(variant, mapping, options)
        if wrong:
            failures.append((wrong, mapping.as_dict(), options.model_dump(exclude_defaults=True),
                             variant.training.model_dump(exclude_defaults=True)))
    assert not failures, f"{len(failures)} disagreements, first: {failures[:3]}"


def test_agreement_covers_both_verdicts_of_the_schedule_rules(problems: dict[str, Problem]) -> None:
    """Seed 000 §PP 和 microbatch / megatron-cases.yaml C02, C05: the VPP rules hold and fail on both
    sides (B with VPP2: m = 4 < PP 8; 64 GPUs TP1 PP4 VPP2 GBS160: 10 % 4 = 2 < PP)."""
    v4 = problems["v4-8192"]
    opts = v4.spec.framework.options
    b = Mapping(gpus=8192, tp=1, pp=8, cp=1, ep=64, etp=1, vpp=2, mbs=1, gbs=4096, seq_len=8192)
    for mapping in (b, b.model_copy(update={"gbs": 8192}), b.model_copy(update={"vpp": 1})):
        assert disagreements(v4, mapping, opts) == []
    llama = problems["llama-dense"]
    c05 = Mapping(gpus=64, tp=1, pp=4, cp=1, vpp=2, mbs=1, gbs=160, seq_len=4096)
    assert disagreements(llama, c05, llama.spec.framework.options) == []
