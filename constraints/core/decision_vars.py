"""The CP-SAT side of a mapping: one integer variable per degree, plus cached products and the
derived degrees (D_a, D_e, m) whose defining equalities rules post behind their own literals.

Products are built unconditionally (AddMultiplicationEquality takes no enforcement literal); the
equalities that give them meaning are linear and carry the rule's literal, so a rule that is off
leaves every derived variable free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import TYPE_CHECKING

from parasol.problems.mapping import DEGREES
from parasol.problems.options import MegatronOptions

if TYPE_CHECKING:
    from ortools.sat.python import cp_model




@dataclass
class DecisionVars:
    """Integer variables of one CP-SAT model; constants (gpus, gbs, seq_len) are plain ints."""

    model: cp_model.CpModel
    gpus: int
    gbs: int
    seq_len: int
    degree: dict[str, cp_model.IntVar]
    recompute: dict[str, cp_model.IntVar]
    consts: dict[str, int]
    options: MegatronOptions = field(default_factory=MegatronOptions)
    memory_fits: Callable[[dict[str, int], str], bool] | None = None
    flags: dict[str, cp_model.IntVar] = field(default_factory=dict)
    """Boolean choices that are not degrees (the solver's rank order); absent ones are fixed from consts."""
    _products: dict[tuple[str, ...], cp_model.IntVar] = field(default_factory=dict)
    _derived: dict[str, cp_model.IntVar] = field(default_factory=dict)

    @classmethod
    def create(cls, model: cp_model.CpModel, gpus: int, gbs: int, seq_len: int,
               domains: dict[str, Sequence[int]], recompute_options: Iterable[str],
               consts: dict[str, int]) -> DecisionVars:
        """One variable per degree over its allowed values, one boolean per recompute choice; `consts`
        are the model's numbers the rules need (heads, query groups, experts, layers)."""
        from parasol.cp_sat import cp_model

        degree = {
            name: model.NewIntVarFromDomain(cp_model.Domain.FromValues(sorted(set(domains[name]))), name)
            for name in DEGREES
        }
        recompute = {opt: model.NewBoolVar(f"recompute_{opt}") for opt in recompute_options}
        model.AddExactlyOne(recompute.values())
        return cls(model, gpus, gbs, seq_len, degree, recompute, dict(consts))

    def __getattr__(self, name: str) -> cp_model.IntVar:
        degree = self.__dict__.get("degree", {})
        if name in degree:
            return degree[name]
        raise AttributeError(name)

    def domain_values(self, name: str) -> list[int]:
        """The values a degree variable may take, ascending."""
        return _values(self.degree[name])

    def table_tuples(self, option: str) -> Iterable[tuple[int, ...]]:
        """The degree tuples (DEGREES order, ascending) a table rule allows or forbids under recompute `option`:
        those its memory oracle's `reach` names where it has one (a repair round's: every other tuple breaks
        another rule of the same model), else every tuple of the domains."""
        domains = [self.domain_values(name) for name in DEGREES]
        reach = getattr(self.memory_fits, "reach", None)
        return product(*domains) if reach is None else reach(domains, option)

    def upper(self, name: str) -> int:
        """Largest value a degree or product variable can take."""
        var = self.degree[name] if name in self.degree else self._products[(name,)]
        return int(list(var.proto.domain)[-1])

    def product(self, *names: str) -> cp_model.IntVar:
        """Variable equal to the product of the named degrees (cached, built pairwise)."""
        key = tuple(names)
        if len(key) == 1:
            return self.degree[key[0]]
        if key in self._products:
            return self._products[key]
        left = self.product(*key[:-1])
        right = self.degree[key[-1]]
        hi = self._bound(left) * self._bound(right)
        var = self.model.NewIntVar(1, hi, "*".join(key))
        self.model.AddMultiplicationEquality(var, [left, right])
        self._products[key] = var
        return var

    def times(self, var: cp_model.IntVar, other: cp_model.IntVar, name: str) -> cp_model.IntVar:
        """Variable equal to var·other (for products with derived variables)."""
        cache = ("__times__", name)
        if cache in self._products:
            return self._products[cache]
        out = self.model.NewIntVar(0, self._bound(var) * self._bound(other), name)
        self.model.AddMultiplicationEquality(out, [var, other])
        self._products[cache] = out
        return out

    @staticmethod
    def _bound(var: cp_model.IntVar) -> int:
        return int(list(var.proto.domain)[-1])

    def derived(self, name: str, upper: int) -> cp_model.IntVar:
        """A free derived variable (D_a, D_e, m, quotients); rules pin it with enforced equalities."""
        if name not in self._derived:
            self._derived[name] = self.model.NewIntVar(0, max(upper, 1), name)
        return self._derived[name]

    def dp_attn(self) -> cp_model.IntVar:
        return self.derived("dp_attn", self.gpus)

    def dp_expert(self) -> cp_model.IntVar:
        return self.derived("dp_expert", self.gpus)

    def microbatches(self) -> cp_model.IntVar:
        return self.derived("num_microbatches", self.gbs)

    def require_dp_attn(self, enforce: cp_model.IntVar) -> cp_model.IntVar:
        """Post TP·PP·CP·D_a = N under `enforce` and return D_a."""
        dp = self.dp_attn()
        self.model.Add(self.times(self.product("tp", "pp", "cp"), dp, "tp*pp*cp*dp_attn") == self.gpus
                       ).OnlyEnforceIf(enforce)
        return dp

    def require_dp_expert(self, enforce: cp_model.IntVar) -> cp_model.IntVar:
        """Post ETP·EP·PP·D_e = N under `enforce` and return D_e."""
        dp = self.dp_expert()
        self.model.Add(self.times(self.product("etp", "ep", "pp"), dp, "etp*ep*pp*dp_expert") == self.gpus
                       ).OnlyEnforceIf(enforce)
        return dp

    def require_microbatches(self, enforce: cp_model.IntVar) -> cp_model.IntVar:
        """Post MBS·D_a·m = GBS (and D_a's definition) under `enforce` and return m."""
        dp = self.require_dp_attn(enforce)
        m = self.microbatches()
        mbs_dp = self.times(self.degree["mbs"], dp, "mbs*dp_attn")
        self.model.Add(self.times(mbs_dp, m, "mbs*dp_attn*m") == self.gbs).OnlyEnforceIf(enforce)
        return m

    def flag(self, name: str) -> cp_model.IntVar:
        """The BoolVar of a non-degree choice: the solver's own variable when it decides it, else one
        fixed to the const of the same name (0 when absent), cached."""
        if name in self.flags:
            return self.flags[name]
        lit = self.model.NewBoolVar(name)
        self.model.Add(lit == self.consts.get(name, 0))
        self.flags[name] = lit
        return lit

    def at_least(self, name: str, bound: int) -> cp_model.IntVar:
        """A BoolVar equal to (degree `name` >= bound), reified both ways and cached."""
        cache = ("__at_least__", name, str(bound))
        if cache not in self._products:
            lit = self.model.NewBoolVar(f"{name}>={bound}")
            self.model.Add(self.degree[name] >= bound).OnlyEnforceIf(lit)
            self.model.Add(self.degree[name] <= bound - 1).OnlyEnforceIf(lit.Not())
            self._products[cache] = lit
        return self._products[cache]

    def all_of(self, literals: Sequence[cp_model.IntVar], name: str) -> cp_model.IntVar:
        """A BoolVar equal to the conjunction of `literals` (to pass one literal where one is expected)."""
        lit = self.model.NewBoolVar(name)
        self.model.AddBoolAnd(literals).OnlyEnforceIf(lit)
        self.model.AddBoolOr([x.Not() for x in literals]).OnlyEnforceIf(lit.Not())
        return lit

    def divides(self, divisor: cp_model.IntVar | int, dividend: cp_model.IntVar | int, name: str,
                enforce: cp_model.IntVar) -> None:
        """Post `divisor | dividend` under `enforce` through an integer quotient variable."""
        if isinstance(divisor, int) and isinstance(dividend, int):
            if dividend % divisor:
                self.model.AddBoolOr([enforce.Not()])
            return
        upper = dividend if isinstance(dividend, int) else self._bound(dividend)
        q = self.model.NewIntVar(0, max(upper, 1), f"q_{name}")
        if isinstance(divisor, int):
            self.model.Add(divisor * q == dividend).OnlyEnforceIf(enforce)
            return
        self.model.Add(self.times(divisor, q, f"{name}_prod") == dividend).OnlyEnforceIf(enforce)


def _values(var: cp_model.IntVar) -> list[int]:
    """Expand a variable's interval domain into its values."""
    bounds = list(var.proto.domain)
    return [x for lo, hi in zip(bounds[::2], bounds[1::2], strict=True) for x in range(lo, hi + 1)]
