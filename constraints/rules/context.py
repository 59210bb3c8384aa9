"""Context-parallel rules of Megatron-Core: the sequence splits into 2·CP load-balanced chunks, and the
hierarchical CP communication needs its group sizes.

Sources: reference/megatron-rules.yaml (cp-seq-divisible-by-2cp, cp-a2a-p2p-requires-
hierarchical, hierarchical-cp-product; Megatron-LM main@d98e8a64) and megatron-groups.md §2.4. The
DeepSeek-V4 CP rules are in constraints/rules/deepseek_v4.py.
"""

from __future__ import annotations

from math import prod

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, remainder_slack
from parasol.constraints.core.consts import model_consts
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import GQAAttention

ARGUMENTS = "Megatron-LM megatron/training/arguments.py"


class CPSeqDivisibleBy2CP(Constraint):
    """With CP > 1 every sequence is cut into 2·CP chunks (the zigzag split), so S % (2·CP) == 0."""

    id = "cp-seq-divisible-by-2cp"
    family = Family.context
    citation = Citation(f"{ARGUMENTS}:1335-1338", MegatronStage.arguments)
    unit = "tokens"
    summary = "CP > 1 -> seq_len % (2·CP) == 0"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """The zigzag split exists only with CP > 1."""
        return f.mapping.cp > 1

    def slack(self, f: Facts) -> float:
        m = f.mapping
        return 0.0 if m.cp == 1 else remainder_slack(m.seq_len, 2 * m.cp)

    def message(self, f: Facts) -> str:
        m = f.mapping
        return (f"seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size > 1. "
                f"(seq_len {m.seq_len}, 2·CP = {2 * m.cp}, remainder {m.seq_len % (2 * m.cp)})")

    def post(self, model, v, enforce) -> None:
        """S odd: only CP 1 passes; S even: CP divides S/2 (CP 1 always does)."""
        if v.seq_len % 2:
            model.Add(v.cp == 1).OnlyEnforceIf(enforce)
            return
        v.divides(v.cp, v.seq_len // 2, "seq_2cp", enforce)


class CPA2AP2PRequiresHierarchical(Constraint):
    """The two-level a2a+p2p CP communication needs --hierarchical-context-parallel-sizes."""
    reads_choices = True

    id = "cp-a2a-p2p-requires-hierarchical"
    family = Family.context
    citation = Citation(f"{ARGUMENTS}:583-585", MegatronStage.arguments)
    unit = "settings"
    summary = "cp_comm_type a2a+p2p -> hierarchical_context_parallel_sizes set"
    exact = True

    def _broken(self, options) -> bool:  # noqa: ANN001 - MegatronOptions
        return options.cp_comm_type == "a2a+p2p" and options.hierarchical_context_parallel_sizes is None

    def in_force(self, f: Facts) -> bool:
        """Only the a2a+p2p CP communication needs the hierarchical sizes."""
        return f.options.cp_comm_type == "a2a+p2p"

    def slack(self, f: Facts) -> float:
        return -1.0 if self._broken(f.options) else 0.0

    def message(self, f: Facts) -> str:
        return "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm"

    def post(self, model, v, enforce) -> None:
        if self._broken(v.options):
            model.AddBoolOr([enforce.Not()])


class CPA2AHeadsDivisible(Constraint):
    """Ulysses CP (--cp-comm-type a2a) gives each CP rank whole attention heads: a TP rank's query heads and
    KV heads both divide by CP (Transformer Engine asserts it in its a2a context-parallel attention at the
    first forward; Megatron itself passes the type through unchecked, so launch-line verdicts leave it out)."""

    reads_choices = True
    id = "cp-a2a-heads-divisible"
    family = Family.context
    citation = Citation("TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/"
                        "context_parallel.py (AttnFuncWithCPAndQKVOA2A.forward: 'The number of attention heads "
                        "needs to be divisible by CP size!')", MegatronStage.not_megatron)
    unit = "heads"
    summary = "cp_comm_type a2a -> (heads/TP) % CP == 0 and (query groups/TP) % CP == 0"
    exact = True

    def applies(self, problem) -> bool:  # noqa: ANN001 - Problem
        return isinstance(problem.model.attention, GQAAttention)

    def in_force(self, f: Facts) -> bool:
        """Only the all-to-all CP communication splits heads."""
        return f.options.cp_comm_type == "a2a"

    def slack(self, f: Facts) -> float:
        if not self.in_force(f):
            return 0.0
        consts, split = model_consts(f.problem), f.mapping.tp * f.mapping.cp
        return min(remainder_slack(consts["num_heads"], split), remainder_slack(consts["num_query_groups"], split))

    def message(self, f: Facts) -> str:
        consts, m = model_consts(f.problem), f.mapping
        return (f"The number of attention heads needs to be divisible by CP size! ({consts['num_heads']} heads and "
                f"{consts['num_query_groups']} KV heads over TP {m.tp}, CP {m.cp})")

    def post(self, model, v, enforce) -> None:
        if v.options.cp_comm_type != "a2a":
            return
        split = v.product("tp", "cp")
        v.divides(split, v.consts["num_heads"], "a2a_heads", enforce)
        v.divides(split, v.consts["num_query_groups"], "a2a_groups", enforce)


class HierarchicalCPProduct(Constraint):
    """The hierarchical CP group sizes multiply to CP."""

    id = "hierarchical-cp-product"
    family = Family.context
    citation = Citation(f"{ARGUMENTS}:580-582; megatron/core/parallel_state.py:1127-1128", MegatronStage.arguments)
    unit = "ranks"
    summary = "hierarchical_context_parallel_sizes set -> prod(sizes) == CP"
    exact = True

    def in_force(self, f: Facts) -> bool:
        """Only given hierarchical sizes must multiply to CP."""
        return f.options.hierarchical_context_parallel_sizes is not None

    def slack(self, f: Facts) -> float:
        sizes = f.options.hierarchical_context_parallel_sizes
        return 0.0 if sizes is None else -float(abs(prod(sizes) - f.mapping.cp))

    def message(self, f: Facts) -> str:
        sizes = f.options.hierarchical_context_parallel_sizes or ()
        return (f"hierarchical_context_parallel_sizes {list(sizes)} multiply to {prod(sizes)}; "
                f"context-parallel-size is {f.mapping.cp}")

    def post(self, model, v, enforce) -> None:
        sizes = v.options.hierarchical_context_parallel_sizes
        if sizes is not None:
            model.Add(v.cp == prod(sizes)).OnlyEnforceIf(enforce)
