"""User-declared restrictions: small conditions a problem file states under `restrictions:`, each
compiled into a Constraint (family user, always on, cited to its problem-file line).

    restrictions:
      - "ep * etp <= 64"
      - {expr: "cp == 1 or packed", id: cp-needs-packing, message: "CP needs packed input"}

The language is a safe subset of Python expressions, parsed with `ast` (mode "eval") and never
executed: integer, decimal and true/false literals; the names in NUMBER_NAMES, `packed` and
`recompute`; + - * // % and unary minus; comparisons (chained too); and, or, not; parentheses;
`x in (4, 8)` over literal tuples; `recompute == 'selective'` or `recompute in ('none', 'full')`.
Anything else is an InputError naming the file, the line, the offending token and a fix.

Parsing pushes every `not` down to the comparisons (De Morgan), so both interpreters read a
negation-free condition:
- Python slack, in the expression's units: a <= b gives b − a; a < b gives b − a − 1/d (d the common
  denominator of the decimals involved, 1 for whole numbers); a == b gives −|a − b|; a != b gives
  |a − b| − 1/d; `in` gives −(distance to the nearest value); and = min, or = max; a condition on a
  flag (`packed`, `recompute`, true/false) gives 0 when it holds and −1 when not.
- CP-SAT: numbers become integer linear expressions scaled by d, products of variables fresh product
  variables, // and % Python's floor division (a = b·q + r with r between 0 and b), each comparison a
  BoolVar reified both ways, and/or BoolVars over them; the top BoolVar is implied by `enforce`.
A restriction that divides by zero anywhere, or that reads dp_attn, dp_expert or num_microbatches
when they are not whole, does not hold (slack −1); CP-SAT forbids the same mappings under `enforce`.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from math import floor, isfinite, lcm
from typing import TYPE_CHECKING

from parasol.constraints.core.base import Citation, Constraint, Facts, Family, is_whole
from parasol.errors import InputError
from parasol.problems.mapping import Recompute
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.schema import RestrictionRule

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

    from parasol.constraints.core.decision_vars import DecisionVars
    from parasol.problems.loader import Problem

NUMBER_NAMES = ("gpus", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "gbs", "seq_len",
                "dp_attn", "dp_expert", "num_microbatches")
FLAG_NAMES = ("packed", "recompute")
RECOMPUTE_VALUES = tuple(r.value for r in Recompute)
MAX_LENGTH = 500
MAX_LITERAL = 10**12
MAX_DECIMAL_DENOMINATOR = 10**6
CP_SAT_LIMIT = 2**62
LANGUAGE = ("numbers, the names " + ", ".join(NUMBER_NAMES + FLAG_NAMES)
            + ", + - * // %, comparisons, and/or/not, parentheses and `name in (4, 8)`")
EXAMPLE = "e.g. `ep * etp <= 64`, `cp == 1 or packed`, `pp in (4, 8)`"

NEGATED = {"<": ">=", "<=": ">", "==": "!=", "!=": "==", ">=": "<", ">": "<="}
COMPARE_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!=", ast.GtE: ">=", ast.Gt: ">"}
ARITH_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
REJECTED = {
    ast.Call: "calls a function", ast.Attribute: "reads an attribute", ast.Subscript: "indexes a value",
    ast.Lambda: "defines a function", ast.IfExp: "is a conditional expression",
    ast.NamedExpr: "assigns a name", ast.Starred: "unpacks a value", ast.JoinedStr: "is an f-string",
    ast.List: "builds a list", ast.Dict: "builds a dict", ast.Set: "builds a set",
    ast.Tuple: "is a tuple (tuples may only follow `in`)",
    ast.ListComp: "is a comprehension", ast.SetComp: "is a comprehension", ast.DictComp: "is a comprehension",
    ast.GeneratorExp: "is a generator", ast.Await: "awaits", ast.Yield: "yields", ast.YieldFrom: "yields",
}


# --- the parsed condition (negation-free) -----------------------------------------------------------

@dataclass(frozen=True)
class Num:
    """A literal number (decimals kept exact)."""

    value: Fraction


@dataclass(frozen=True)
class Var:
    """A numeric name of the mapping or its derived sizes."""

    name: str


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    operand: NumberNode


@dataclass(frozen=True)
class Arith:
    """A binary arithmetic operation: + - * // %."""

    op: str
    left: NumberNode
    right: NumberNode
    text: str


@dataclass(frozen=True)
class Truth:
    """A true/false literal."""

    value: bool


@dataclass(frozen=True)
class Packed:
    """`packed` (expected True) or `not packed` (expected False)."""

    expected: bool


@dataclass(frozen=True)
class RecomputeIs:
    """`recompute` is (or, negated, is not) one of the values."""

    values: frozenset[str]
    negated: bool


@dataclass(frozen=True)
class Compare:
    """One comparison of two numbers."""

    op: str
    left: NumberNode
    right: NumberNode


@dataclass(frozen=True)
class Member:
    """`x in (…)` or, negated, `x not in (…)` over literal numbers."""

    operand: NumberNode
    values: tuple[Fraction, ...]
    negated: bool


@dataclass(frozen=True)
class Logic:
    """`and` / `or` of conditions."""

    op: str
    parts: tuple[Condition, ...]


NumberNode = Num | Var | Neg | Arith
Condition = Truth | Packed | RecomputeIs | Compare | Member | Logic


def scale(node: NumberNode) -> int:
    """Common denominator d of a number node: d·value is always a whole number."""
    if isinstance(node, Num):
        return node.value.denominator
    if isinstance(node, Var):
        return 1
    if isinstance(node, Neg):
        return scale(node.operand)
    if node.op in ("+", "-"):
        return lcm(scale(node.left), scale(node.right))
    if node.op == "*":
        return scale(node.left) * scale(node.right)
    return 1


# --- parsing ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """Where a restriction stands, for errors: file, line, its index and its text."""

    file: str
    line: int | None
    index: int
    text: str

    def error(self, detail: str, fix: str) -> InputError:
        """An InputError at this restriction."""
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        return InputError(f"Restriction {self.index + 1} `{shown}`: {detail}.",
                          field=f"restrictions.{self.index}", expected=f"a condition, {EXAMPLE}",
                          fix=fix, file=self.file, line=self.line)


class _Parser:
    """Turns a Python expression tree into a negation-free Condition, rejecting everything else."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.names: list[str] = []

    def segment(self, node: ast.AST) -> str:
        """The source text of a node (the offending token in errors)."""
        return ast.get_source_segment(self.source.text, node) or type(node).__name__

    def fail(self, node: ast.AST, reason: str, fix: str | None = None) -> InputError:
        """An error naming the node's text."""
        return self.source.error(f"`{self.segment(node)}` {reason}",
                                 fix or f"write a condition using only {LANGUAGE}; {EXAMPLE}.")

    def reject(self, node: ast.AST) -> InputError:
        """An error for a construct outside the language."""
        reason = REJECTED.get(type(node), f"is not allowed ({type(node).__name__})")
        return self.fail(node, reason)

    def name(self, node: ast.Name) -> str:
        """A known name, recorded in order of first use; anything else is an error."""
        if node.id not in NUMBER_NAMES + FLAG_NAMES:
            near = difflib.get_close_matches(node.id, NUMBER_NAMES + FLAG_NAMES, n=1)
            hint = f"did you mean `{near[0]}`? " if near else ""
            raise self.fail(node, "is not a known name",
                            f"{hint}use one of: {', '.join(NUMBER_NAMES + FLAG_NAMES)}.")
        if node.id not in self.names:
            self.names.append(node.id)
        return node.id

    def condition(self, node: ast.AST, negate: bool = False) -> Condition:
        """Parse a node that must be a condition; `negate` pushes a surrounding `not` inwards."""
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            if negate:
                op = "or" if op == "and" else "and"
            return Logic(op, tuple(self.condition(v, negate) for v in node.values))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.condition(node.operand, not negate)
        if isinstance(node, ast.Compare):
            return self.comparison(node, negate)
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return Truth(node.value != negate)
        if isinstance(node, ast.Name):
            name = self.name(node)
            if name == "packed":
                return Packed(not negate)
            raise self.fail(node, "is not a condition" if name != "recompute" else "is a text value, not a condition",
                            f"compare it, e.g. `{name} <= 8`." if name != "recompute"
                            else "compare it, e.g. `recompute == 'selective'`.")
        if isinstance(node, ast.Constant | ast.BinOp | ast.UnaryOp):
            self.number(node)
            raise self.fail(node, "is a number, not a condition", f"compare it with something; {EXAMPLE}.")
        raise self.reject(node)

    def comparison(self, node: ast.Compare, negate: bool) -> Condition:
        """A comparison or a chain of them (a < b < c is a < b and b < c)."""
        ops, operands = node.ops, [node.left, *node.comparators]
        if len(ops) > 1 and any(isinstance(op, ast.In | ast.NotIn) for op in ops):
            raise self.fail(node, "chains a membership test", "write `x in (…)` on its own and join with and/or.")
        pairs = [self.pair(a, op, b, negate) for a, op, b in zip(operands, ops, operands[1:], strict=False)]
        if len(pairs) == 1:
            return pairs[0]
        return Logic("or" if negate else "and", tuple(pairs))

    def pair(self, left: ast.AST, op: ast.cmpop, right: ast.AST, negate: bool) -> Condition:
        """One comparison of two operands."""
        if any(_is_recompute(x) for x in (left, right)):
            return self.recompute_test(left, op, right, negate)
        if isinstance(op, ast.In | ast.NotIn):
            values = self.literal_numbers(right)
            return Member(self.number(left), values, isinstance(op, ast.NotIn) != negate)
        if type(op) not in COMPARE_OPS:
            raise self.source.error(f"the operator `{type(op).__name__}` is not allowed",
                                    "compare numbers with < <= == != >= > or test `x in (4, 8)`.")
        symbol = COMPARE_OPS[type(op)]
        return Compare(NEGATED[symbol] if negate else symbol, self.number(left), self.number(right))

    def recompute_test(self, left: ast.AST, op: ast.cmpop, right: ast.AST, negate: bool) -> RecomputeIs:
        """`recompute == 'x'`, `'x' != recompute`, `recompute in ('x', 'y')` and the like."""
        name, other = (left, right) if _is_recompute(left) else (right, left)
        self.name(name)
        fix = "write `recompute == 'selective'` or `recompute in ('none', 'full')`."
        if isinstance(op, ast.Eq | ast.NotEq):
            values = (self.recompute_value(other, fix),)
            negated = isinstance(op, ast.NotEq)
        elif isinstance(op, ast.In | ast.NotIn) and name is left:
            if not isinstance(other, ast.Tuple):
                raise self.fail(other, "is not a literal tuple", fix)
            values = tuple(self.recompute_value(e, fix) for e in other.elts)
            negated = isinstance(op, ast.NotIn)
        else:
            raise self.fail(name, "can only be tested with ==, != or in", fix)
        return RecomputeIs(frozenset(values), negated != negate)

    def recompute_value(self, node: ast.AST, fix: str) -> str:
        """One of the recompute choices as a text literal."""
        if isinstance(node, ast.Constant) and node.value in RECOMPUTE_VALUES and isinstance(node.value, str):
            return node.value
        raise self.fail(node, f"is not one of {', '.join(repr(v) for v in RECOMPUTE_VALUES)}", fix)

    def literal_numbers(self, node: ast.AST) -> tuple[Fraction, ...]:
        """The literal tuple after `in`."""
        fix = "write the allowed values as a tuple of numbers, e.g. `pp in (4, 8)`."
        if not isinstance(node, ast.Tuple):
            raise self.fail(node, "is not a literal tuple of numbers", fix)
        values = []
        for element in node.elts:
            parsed = self.number(element)
            if isinstance(parsed, Neg) and isinstance(parsed.operand, Num):
                parsed = Num(-parsed.operand.value)
            if not isinstance(parsed, Num):
                raise self.fail(element, "is not a literal number", fix)
            values.append(parsed.value)
        return tuple(values)

    def number(self, node: ast.AST) -> NumberNode:
        """Parse a node that must be a number."""
        if isinstance(node, ast.Constant):
            return Num(self.literal(node))
        if isinstance(node, ast.Name):
            name = self.name(node)
            if name in FLAG_NAMES:
                raise self.fail(node, "is not a number",
                                "use `packed` as a condition (`cp == 1 or packed`) and compare `recompute` with "
                                "a text value (`recompute == 'full'`).")
            return Var(name)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return Neg(self.number(node.operand))
            if isinstance(node.op, ast.UAdd):
                return self.number(node.operand)
            if isinstance(node.op, ast.Not):
                raise self.fail(node, "is a condition, not a number", f"{EXAMPLE}.")
            raise self.reject(node)
        if isinstance(node, ast.BinOp):
            return self.arithmetic(node)
        if isinstance(node, ast.Compare | ast.BoolOp):
            raise self.fail(node, "is a condition, not a number", "join conditions with and/or, not arithmetic.")
        raise self.reject(node)

    def arithmetic(self, node: ast.BinOp) -> Arith:
        """+ - * // % of two numbers; // and % need whole-number operands."""
        if isinstance(node.op, ast.Div):
            raise self.fail(node, "uses `/`", "use `//` (whole-number division) or multiply out the comparison.")
        if type(node.op) not in ARITH_OPS:
            raise self.fail(node, f"uses an operator that is not allowed ({type(node.op).__name__})",
                            "use + - * // % only.")
        op = ARITH_OPS[type(node.op)]
        left, right = self.number(node.left), self.number(node.right)
        if op in ("//", "%") and (scale(left) != 1 or scale(right) != 1):
            raise self.fail(node, f"applies `{op}` to a decimal", f"use whole numbers on both sides of `{op}`.")
        return Arith(op, left, right, self.segment(node))

    def literal(self, node: ast.Constant) -> Fraction:
        """A numeric literal within CP-SAT's reach (decimals with at most 6 places)."""
        value = node.value
        if isinstance(value, bool):
            raise self.fail(node, "is true/false, not a number", "compare numbers; use `packed` for the flag.")
        if isinstance(value, str):
            raise self.fail(node, "is text", "text is only allowed in a test of `recompute`, e.g. "
                            "`recompute == 'selective'`.")
        if not isinstance(value, int | float):
            raise self.reject(node)
        if isinstance(value, float) and not isfinite(value):
            raise self.fail(node, "is not a finite number", f"use numbers up to {MAX_LITERAL:.0e}.")
        exact = Fraction(value) if isinstance(value, int) else Fraction(repr(value))
        if abs(exact) > MAX_LITERAL or exact.denominator > MAX_DECIMAL_DENOMINATOR:
            raise self.fail(node, "is out of range", f"use numbers up to {MAX_LITERAL:.0e} with at most 6 decimals.")
        return exact


def _is_recompute(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "recompute"


def parse_restriction(source: Source) -> tuple[Condition, tuple[str, ...]]:
    """Parse one restriction's text into a negation-free condition and the names it reads."""
    text = source.text
    if len(text) > MAX_LENGTH:
        raise source.error(f"is {len(text)} characters long", f"keep a restriction under {MAX_LENGTH} characters.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        where = f" at column {exc.offset}" if exc.offset else ""
        raise source.error(f"is not a valid expression ({exc.msg}{where})",
                           f"write a condition, {EXAMPLE}.") from None
    parser = _Parser(Source(source.file, source.line, source.index, text.strip()))
    condition = parser.condition(tree.body)
    return condition, tuple(parser.names)


# --- Python side -----------------------------------------------------------------------------------

class Undefined(Exception):
    """A restriction that cannot be evaluated for this mapping (division by zero, a derived size that
    is not whole); it does not hold."""


def _whole(name: str, value: Fraction, why: str) -> Fraction:
    if not is_whole(value):
        raise Undefined(f"{name} = {float(value):g} is not a whole number ({why})")
    return value


def environment(f: Facts, names: tuple[str, ...]) -> dict[str, Fraction | bool | str]:
    """Values of the names a restriction reads, for one mapping."""
    m, d = f.mapping, f.derived
    plain = {"gpus": m.gpus, "tp": m.tp, "pp": m.pp, "cp": m.cp, "ep": m.ep, "etp": m.expert_tp,
             "vpp": m.vpp, "mbs": m.mbs, "gbs": m.gbs, "seq_len": m.seq_len}
    env: dict[str, Fraction | bool | str] = {}
    for name in names:
        if name in plain:
            env[name] = Fraction(plain[name])
        elif name == "dp_attn":
            env[name] = _whole(name, d.dp_attn, "world size not divisible by TP·PP·CP")
        elif name == "dp_expert":
            env[name] = _whole(name, d.dp_expert, "world size not divisible by ETP·EP·PP")
        elif name == "num_microbatches":
            _whole("dp_attn", d.dp_attn, "world size not divisible by TP·PP·CP")
            env[name] = _whole(name, d.num_microbatches, "GBS not divisible by MBS·D_a")
        elif name == "packed":
            env[name] = f.training.packed_sequences
        else:
            env[name] = m.recompute.value
    return env


def evaluate_number(node: NumberNode, env: dict) -> Fraction:
    """Exact value of a number node (Python's floor semantics for // and %)."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        return env[node.name]
    if isinstance(node, Neg):
        return -evaluate_number(node.operand, env)
    a, b = evaluate_number(node.left, env), evaluate_number(node.right, env)
    if node.op in ("//", "%") and b == 0:
        raise Undefined(f"`{node.text}` divides by zero")
    ops: dict[str, Callable[[Fraction, Fraction], Fraction]] = {
        "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
        "//": lambda x, y: Fraction(x // y), "%": lambda x, y: x % y,
    }
    return ops[node.op](a, b)


def _compare_slack(op: str, a: Fraction, b: Fraction, d: int) -> Fraction:
    """Signed slack of `a op b`, >= 0 exactly when it holds (values are multiples of 1/d)."""
    step = Fraction(1, d)
    return {"<=": b - a, "<": b - a - step, ">=": a - b, ">": a - b - step,
            "==": -abs(a - b), "!=": abs(a - b) - step}[op]


def condition_slack(node: Condition, env: dict) -> Fraction:
    """Signed slack of a condition (module docstring)."""
    if isinstance(node, Truth):
        return Fraction(0 if node.value else -1)
    if isinstance(node, Packed):
        return Fraction(0 if env["packed"] == node.expected else -1)
    if isinstance(node, RecomputeIs):
        return Fraction(0 if (env["recompute"] in node.values) != node.negated else -1)
    if isinstance(node, Compare):
        d = lcm(scale(node.left), scale(node.right))
        return _compare_slack(node.op, evaluate_number(node.left, env), evaluate_number(node.right, env), d)
    if isinstance(node, Member):
        return _member_slack(node, evaluate_number(node.operand, env))
    slacks = [condition_slack(p, env) for p in node.parts]
    return min(slacks) if node.op == "and" else max(slacks)


def _member_slack(node: Member, x: Fraction) -> Fraction:
    """`in`: minus the distance to the nearest value; `not in`: that distance less one step."""
    if not node.values:
        return Fraction(0 if node.negated else -1)
    d = lcm(scale(node.operand), *(v.denominator for v in node.values))
    distance = min(abs(x - v) for v in node.values)
    return distance - Fraction(1, d) if node.negated else -distance


# --- CP-SAT side -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lin:
    """d·value of a number node as an integer linear expression with bounds (lo, hi)."""

    expr: cp_model.LinearExprT
    lo: int
    hi: int
    d: int

    @property
    def constant(self) -> bool:
        return isinstance(self.expr, int)


class _Compiler:
    """Posts one condition into a CP-SAT model; definitions of quotients and derived sizes hold under
    `enforce`, comparisons are reified both ways."""

    def __init__(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar,
                 packed: bool, where: Source) -> None:
        self.model, self.v, self.enforce, self.packed, self.where = model, v, enforce, packed, where

    def check(self, lo: int, hi: int) -> None:
        """Refuse bounds outside CP-SAT's 64-bit integers."""
        if max(abs(lo), abs(hi)) > CP_SAT_LIMIT:
            raise self.where.error("reaches values beyond CP-SAT's 64-bit integers on this search space",
                                   "bound the expression (smaller literals or fewer products).")

    def lin(self, expr: cp_model.LinearExprT, lo: int, hi: int, d: int) -> Lin:
        """A bounded expression (bounds checked)."""
        self.check(lo, hi)
        return Lin(expr, lo, hi, d)

    def var(self, lin: Lin, name: str) -> cp_model.IntVar:
        """The expression as one variable (defined unconditionally: its domain covers every value)."""
        from parasol.cp_sat import cp_model

        if isinstance(lin.expr, cp_model.IntVar):
            return lin.expr
        out = self.model.NewIntVar(lin.lo, lin.hi, name)
        self.model.Add(out == lin.expr)
        return out

    def fixed(self, truth: bool) -> cp_model.IntVar:
        """A literal with a known value."""
        lit = self.model.NewBoolVar(f"user_{truth}")
        self.model.Add(lit == int(truth))
        return lit

    def name(self, name: str) -> Lin:
        """A mapping name: constants stay ints, degrees and derived sizes are variables."""
        v = self.v
        consts = {"gpus": v.gpus, "gbs": v.gbs, "seq_len": v.seq_len}
        if name in consts:
            return self.lin(consts[name], consts[name], consts[name], 1)
        derived = {"dp_attn": v.require_dp_attn, "dp_expert": v.require_dp_expert,
                   "num_microbatches": v.require_microbatches}
        var = derived[name](self.enforce) if name in derived else v.degree[name]
        domain = list(var.proto.domain)
        return self.lin(var, int(domain[0]), int(domain[-1]), 1)

    def number(self, node: NumberNode) -> Lin:
        """Compile a number node."""
        if isinstance(node, Num):
            return self.lin(node.value.numerator, node.value.numerator, node.value.numerator, node.value.denominator)
        if isinstance(node, Var):
            return self.name(node.name)
        if isinstance(node, Neg):
            x = self.number(node.operand)
            return self.lin(-x.expr, -x.hi, -x.lo, x.d)
        a, b = self.number(node.left), self.number(node.right)
        if node.op in ("+", "-"):
            d = lcm(a.d, b.d)
            ka, kb = d // a.d, d // b.d
            if node.op == "+":
                return self.lin(ka * a.expr + kb * b.expr, ka * a.lo + kb * b.lo, ka * a.hi + kb * b.hi, d)
            return self.lin(ka * a.expr - kb * b.expr, ka * a.lo - kb * b.hi, ka * a.hi - kb * b.lo, d)
        if node.op == "*":
            return self.product(a, b)
        return self.floor_division(a, b, node.op)

    def product(self, a: Lin, b: Lin) -> Lin:
        """a·b: scaled when one side is constant, else a fresh product variable."""
        corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        lo, hi = min(corners), max(corners)
        if a.constant or b.constant:
            c, x = (a, b) if a.constant else (b, a)
            return self.lin(c.expr * x.expr, lo, hi, a.d * b.d)
        self.check(lo, hi)
        out = self.model.NewIntVar(lo, hi, "user_product")
        self.model.AddMultiplicationEquality(out, [self.var(a, "user_factor"), self.var(b, "user_factor")])
        return self.lin(out, lo, hi, a.d * b.d)

    def floor_division(self, a: Lin, b: Lin, op: str) -> Lin:
        """Python's a // b and a % b: a = b·q + r with 0 <= r < b (b > 0) or b < r <= 0 (b < 0),
        posted under `enforce` (which also forbids b == 0)."""
        m, enforce = self.model, self.enforce
        if b.constant:
            c = b.expr
            if c == 0:
                m.AddBoolOr([enforce.Not()])
                return self.lin(0, 0, 0, 1)
            q_lo, q_hi = sorted((floor(Fraction(a.lo, c)), floor(Fraction(a.hi, c))))
            r_lo, r_hi = (0, c - 1) if c > 0 else (c + 1, 0)
            q, r = m.NewIntVar(q_lo, q_hi, "user_quotient"), m.NewIntVar(r_lo, r_hi, "user_remainder")
            m.Add(a.expr == c * q + r).OnlyEnforceIf(enforce)
        else:
            size, top = max(abs(b.lo), abs(b.hi)), max(abs(a.lo), abs(a.hi))
            self.check(-size * top, size * top)
            q_lo, q_hi, r_lo, r_hi = -top, top, -max(size - 1, 0), max(size - 1, 0)
            q, r = m.NewIntVar(q_lo, q_hi, "user_quotient"), m.NewIntVar(r_lo, r_hi, "user_remainder")
            divisor = self.var(b, "user_divisor")
            prod = m.NewIntVar(-size * top, size * top, "user_divisor_times_quotient")
            m.AddMultiplicationEquality(prod, [divisor, q])
            positive = m.NewBoolVar("user_divisor_positive")
            m.Add(divisor >= 1).OnlyEnforceIf(positive)
            m.Add(divisor <= 0).OnlyEnforceIf(positive.Not())
            m.Add(r >= 0).OnlyEnforceIf([enforce, positive])
            m.Add(r <= divisor - 1).OnlyEnforceIf([enforce, positive])
            m.Add(divisor <= -1).OnlyEnforceIf([enforce, positive.Not()])
            m.Add(r <= 0).OnlyEnforceIf([enforce, positive.Not()])
            m.Add(r >= divisor + 1).OnlyEnforceIf([enforce, positive.Not()])
            m.Add(a.expr == prod + r).OnlyEnforceIf(enforce)
        return self.lin(q, q_lo, q_hi, 1) if op == "//" else self.lin(r, r_lo, r_hi, 1)

    def condition(self, node: Condition) -> cp_model.IntVar:
        """A literal equal to the condition's truth (under `enforce`'s definitions)."""
        if isinstance(node, Truth):
            return self.fixed(node.value)
        if isinstance(node, Packed):
            return self.fixed(self.packed == node.expected)
        if isinstance(node, RecomputeIs):
            return self.recompute(node)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, Member):
            return self.member(node)
        return self.logic(node)

    def recompute(self, node: RecomputeIs) -> cp_model.IntVar:
        """OR of the recompute choices named (negated: its complement)."""
        flags = [self.v.recompute[r] for r in sorted(node.values) if r in self.v.recompute]
        if not flags:
            return self.fixed(node.negated)
        lit = self.model.NewBoolVar("user_recompute")
        self.model.AddMaxEquality(lit, flags)
        return lit.Not() if node.negated else lit

    def compare(self, node: Compare) -> cp_model.IntVar:
        """a op b on the common scale, reified both ways."""
        a, b = self.number(node.left), self.number(node.right)
        d = lcm(a.d, b.d)
        left, right = (d // a.d) * a.expr, (d // b.d) * b.expr
        relations: dict[str, Callable] = {
            "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, "==": lambda x, y: x == y,
            "!=": lambda x, y: x != y, ">=": lambda x, y: x >= y, ">": lambda x, y: x > y,
        }
        if a.constant and b.constant:
            return self.fixed(relations[node.op](left, right))
        lit = self.model.NewBoolVar("user_compare")
        self.model.Add(relations[node.op](left, right)).OnlyEnforceIf(lit)
        self.model.Add(relations[NEGATED[node.op]](left, right)).OnlyEnforceIf(lit.Not())
        return lit

    def member(self, node: Member) -> cp_model.IntVar:
        """x in (values) on the common scale, reified both ways (negated: its complement)."""
        x = self.number(node.operand)
        d = lcm(x.d, *(v.denominator for v in node.values))
        scaled = (d // x.d) * x.expr
        allowed = sorted({int(v * d) for v in node.values})
        if x.constant or not allowed:
            lit = self.fixed(x.constant and scaled in allowed)
        else:
            lit = self.model.NewBoolVar("user_member")
            from parasol.cp_sat import cp_model

            self.model.AddLinearExpressionInDomain(scaled, cp_model.Domain.FromValues(allowed)).OnlyEnforceIf(lit)
            for value in allowed:
                self.model.Add(scaled != value).OnlyEnforceIf(lit.Not())
        return lit.Not() if node.negated else lit

    def logic(self, node: Logic) -> cp_model.IntVar:
        """and / or of sub-literals, reified both ways."""
        parts = [self.condition(p) for p in node.parts]
        lit = self.model.NewBoolVar(f"user_{node.op}")
        if node.op == "and":
            self.model.AddBoolAnd(parts).OnlyEnforceIf(lit)
            self.model.AddBoolOr([p.Not() for p in parts]).OnlyEnforceIf(lit.Not())
        else:
            self.model.AddBoolOr(parts).OnlyEnforceIf(lit)
            self.model.AddBoolAnd([p.Not() for p in parts]).OnlyEnforceIf(lit.Not())
        return lit


# --- the Constraint --------------------------------------------------------------------------------

class UserRestriction(Constraint):
    """One user-declared restriction of a problem file."""

    family = Family.user
    pack = None
    unit = ""

    def __init__(self, rule_id: str, source: Source, condition: Condition, names: tuple[str, ...],
                 note: str | None, packed: bool) -> None:
        self.id = rule_id
        self.summary = source.text
        self.citation = Citation(f"{source.file}:{source.line}", MegatronStage.not_megatron)
        self.source, self.condition, self.names, self.note, self.packed = source, condition, names, note, packed
        self.exact = never_positive(condition)

    def slack(self, f: Facts) -> float:
        try:
            return float(condition_slack(self.condition, environment(f, self.names)))
        except Undefined:
            return -1.0

    def message(self, f: Facts) -> str:
        try:
            env = environment(f, self.names)
            slack = condition_slack(self.condition, env)
        except Undefined as exc:
            return f"{self.note + ': ' if self.note else ''}`{self.source.text}` cannot be evaluated: {exc}"
        values = ", ".join(f"{n}={_show(env[n])}" for n in self.names)
        verdict = "holds" if slack >= 0 else "does not hold"
        text = f"`{self.source.text}` {verdict}" + (f" with {values}" if values else "")
        return f"{self.note} ({text})" if self.note else text

    def post(self, model: cp_model.CpModel, v: DecisionVars, enforce: cp_model.IntVar) -> None:
        top = _Compiler(model, v, enforce, self.packed, self.source).condition(self.condition)
        model.AddImplication(enforce, top)


def never_positive(node: Condition) -> bool:
    """Whether the condition's slack is at most 0 whenever it holds (an equality, a membership, a flag, or
    `and` with one such part, `or` of only such parts): then slack 0 is how it holds, never a tight limit."""
    if isinstance(node, Truth | Packed | RecomputeIs):
        return True
    if isinstance(node, Compare):
        return node.op == "=="
    if isinstance(node, Member):
        return not node.negated
    parts = [never_positive(p) for p in node.parts]
    return any(parts) if node.op == "and" else all(parts)


def _show(value: Fraction | bool | str) -> str:
    if isinstance(value, Fraction):
        return str(int(value)) if value.denominator == 1 else f"{float(value):g}"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def user_constraints(problem: Problem) -> tuple[UserRestriction, ...]:
    """Compile the problem's `restrictions:` into Constraints (InputError on any bad expression)."""
    rules: list[UserRestriction] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(problem.spec.restrictions):
        text, rule_id, note = (item.expr, item.id, item.message) if isinstance(item, RestrictionRule) else (
            item, None, None)
        source = Source(problem.source, problem.line_of("restrictions", i), i, text)
        rule_id = rule_id or f"user-{i + 1}"
        if rule_id in seen:
            raise source.error(f"reuses the id `{rule_id}` of restriction {seen[rule_id] + 1}",
                               "give each restriction its own id.")
        seen[rule_id] = i
        condition, names = parse_restriction(source)
        rules.append(UserRestriction(rule_id, source, condition, names, note, problem.training.packed_sequences))
    return tuple(rules)
