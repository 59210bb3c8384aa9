"""The exceptions parasol raises for bad input; the CLI turns each into one paragraph and exit 2.

`validation_input_error` turns pydantic's report on a schema object into that paragraph: the field
as a dotted path through the user's own data (pydantic's union-branch tags removed), the offending
value shortened, what the schema expects in plain words, and a next step.
"""

from __future__ import annotations

import difflib
import math
import re
import reprlib
from collections.abc import Callable, Collection, Iterator, Mapping
from enum import Enum
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError

Loc = tuple[str | int, ...]

VALUE_CHARS = 60
"""Longest value shown in a message; longer ones are cut with '...'."""

_SHORT = reprlib.Repr()
_SHORT.maxstring = VALUE_CHARS
_SHORT.maxother = VALUE_CHARS
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 4
_SHORT.maxlevel = 2


class ParasolError(Exception):
    """Base of every error parasol reports to a user instead of a traceback."""


class InputError(ParasolError):
    """A problem file, flag or catalog entry is wrong: names where, what, what was expected and a fix."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        value: object = None,
        expected: str | None = None,
        fix: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.fix = fix
        self.file = file
        self.line = line
        self.detail = message
        super().__init__(self.render())

    def render(self) -> str:
        """One paragraph: location, field, value, what was expected, and the next step."""
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        parts = [f"{where}{self.detail}"]
        if self.field is not None and self.value is not None:
            parts.append(f"Field `{self.field}` has value {short(self.value)}.")
        elif self.field is not None and f"`{self.field}`" not in self.detail:
            parts.append(f"Field `{self.field}`.")
        if self.expected:
            parts.append(f"Expected {self.expected}.")
        if self.fix:
            parts.append(f"Fix: {self.fix}")
        return one_paragraph(" ".join(parts))


class CatalogError(InputError):
    """A name that is not in a catalog (model or hardware preset)."""


def short(value: object) -> str:
    """A value as it appears in a message: its repr, cut to about VALUE_CHARS characters."""
    text = _SHORT.repr(value)
    return text if len(text) <= VALUE_CHARS + 5 else text[:VALUE_CHARS] + "..."


def one_paragraph(text: str) -> str:
    """Line breaks become spaces, so a message is always one paragraph."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def dotted(loc: Loc) -> str:
    """A location as the dotted field path users write (`training.seq_len`, `search.ep.1`)."""
    return ".".join(str(p) for p in loc)


def value_kind(value: object) -> str:
    """What a YAML value is, in the words a user would use (for 'got text', 'got a list')."""
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "a whole number"
    if isinstance(value, float):
        return "a fraction" if math.isfinite(value) and not value.is_integer() else "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


# --- plain-words descriptions of schema types -------------------------------------------------


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """A type without `Annotated[...]`, and the metadata that wrapper carried."""
    meta: list[Any] = []
    while get_origin(tp) is Annotated:
        tp, *extra = get_args(tp)
        meta.extend(extra)
    return tp, meta


def type_atoms(tp: Any) -> Iterator[Any]:
    """Every plain type a value may take under `tp`, through unions, Optional and Annotated."""
    tp, _ = _unwrap(tp)
    if get_origin(tp) in (Union, UnionType):
        for arg in get_args(tp):
            yield from type_atoms(arg)
    else:
        yield tp


def _bounds(meta: list[Any]) -> str:
    """Numeric bounds of `Field(gt=…, le=…)` / PositiveInt metadata, as ' > 0 and <= 8'."""
    words = []
    for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        for m in meta:
            bound = getattr(m, attr, None)
            if isinstance(m, annotated_types.BaseMetadata) and bound is not None:
                words.append(f"{op} {bound:,}" if isinstance(bound, int) else f"{op} {bound}")
    return (" " + " and ".join(words)) if words else ""


def _choices(values: list[Any]) -> str:
    return "one of " + ", ".join(repr(v.value if isinstance(v, Enum) else v) for v in values)


def describe_type(tp: Any, meta: list[Any] | None = None) -> str:
    """Plain words for a schema type: 'a whole number > 0, or a list of them', "one of 'adam', 'muon'"."""
    tp, inner = _unwrap(tp)
    bounds = _bounds([*(meta or []), *inner])
    origin = get_origin(tp)
    if origin in (Union, UnionType):
        parts = [describe_type(a, meta) for a in get_args(tp) if a is not NoneType]
        return " or ".join(dict.fromkeys(parts))
    if origin is Literal:
        return _choices(list(get_args(tp)))
    if origin in (list, tuple, set, frozenset):
        items = [a for a in get_args(tp) if a is not Ellipsis]
        if origin is tuple and len(items) > 1 and Ellipsis not in get_args(tp):
            return f"a list of {len(items)} items"
        return "a list" + (f" (each item {describe_type(items[0])})" if items else "")
    if origin is dict or tp is dict:
        return "a mapping of keys to values"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _choices(list(tp))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        keys = list(tp.model_fields)
        more = f" and {len(keys) - 6} more" if len(keys) > 6 else ""
        return f"a mapping with keys such as {', '.join(keys[:6])}{more}"
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}
    return words.get(tp, getattr(tp, "__name__", str(tp))) + bounds


# --- walking a location through the schema and the user's data ---------------------------------


def _model_with(tp: Any, name: str) -> type[BaseModel] | None:
    """The schema class under `tp` (a union, list or Optional of models) that has field `name`."""
    for atom in type_atoms(tp):
        if isinstance(atom, type) and issubclass(atom, BaseModel) and name in atom.model_fields:
            return atom
    return None


def _item_type(tp: Any) -> Any:
    """The item type of the list or tuple branch of `tp`, or None."""
    for atom in type_atoms(tp):
        if get_origin(atom) in (list, tuple) and get_args(atom):
            return get_args(atom)[0]
    return None


def schema_at(model_cls: type[BaseModel], path: Loc) -> tuple[Any, list[Any], str | None]:
    """The declared type, its bounds and its description at a data path inside `model_cls`."""
    tp: Any = model_cls
    meta: list[Any] = []
    desc: str | None = None
    for part in path:
        if isinstance(part, int):
            tp, meta, desc = _item_type(tp), [], None
            continue
        cls = _model_with(tp, part)
        if cls is None:
            return None, [], None
        info = cls.model_fields[part]
        tp, meta, desc = info.annotation, list(info.metadata), info.description
    return tp, meta, desc


KEYS_LISTED = 12
"""Known keys an unknown-key error lists in full; a longer list shows the closest ones (one paragraph)."""


def known_keys_text(key: str, keys: list[str]) -> str:
    """The keys an unknown key could have been: all of them, or the closest KEYS_LISTED and how many more."""
    if not keys:
        return "no key here"
    if len(keys) <= KEYS_LISTED:
        return "one of the known keys: " + ", ".join(keys)
    near = difflib.get_close_matches(key, keys, n=KEYS_LISTED, cutoff=0.0)
    return f"one of {len(keys)} known keys, the closest: " + ", ".join(near) + f" (and {len(keys) - len(near)} more)"


MEGATRON_KEY_NAMES = {
    "tensor_model_parallel_size": ("tp",), "pipeline_model_parallel_size": ("pp",),
    "context_parallel_size": ("cp",), "expert_model_parallel_size": ("ep",), "expert_tensor_parallel_size": ("etp",),
    "virtual_pipeline_model_parallel_size": ("vpp",), "num_virtual_stages_per_pipeline_rank": ("vpp",),
    "micro_batch_size": ("mbs", "micro_batch"), "global_batch_size": ("global_batch",), "seq_length": ("seq_len",),
    "world_size": ("gpus",), "num_gpus": ("gpus",),
}
"""Megatron-LM's names (argparse dests, dashes or underscores) of keys a problem file spells its own way: a
problem key Megatron's name stands for, where that key is known."""
NODE_KEYS = {"nodes", "num_nodes", "nnodes", "node_count"}
"""Keys that count nodes where a problem file counts GPUs (hardware.gpus)."""
DERIVED_KEYS = {"dp", "data_parallel_size", "edp", "expert_dp", "expert_data_parallel_size"}
"""Keys users write that parasol derives, never reads: the data-parallel sizes (GPUs / (TP·PP·CP), and
GPUs / (ETP·EP·PP) for the experts)."""


OPTIONS_PATH = ("framework", "options")
"""Where a problem file's Megatron options live."""


def unknown_key_fix(key: str, keys: list[str], option_keys: Collection[str] = ()) -> str:
    """The next step for an unknown key: a derived size is named as such, a node count or a Megatron name given the
    key it stands for, a Megatron option written elsewhere sent to framework.options (`option_keys`, empty there),
    anything else the closest known key."""
    name = key.replace("-", "_").lower()
    if name in option_keys and name not in keys:
        return f"it is a Megatron option: write `{name}:` under `{'.'.join(OPTIONS_PATH)}`."
    if name in DERIVED_KEYS and "tp" in keys:
        return ("remove it: parasol derives the data-parallel size as GPUs / (TP·PP·CP) (experts: GPUs / "
                "(ETP·EP·PP)); set the GPU count in hardware.gpus.")
    if name in NODE_KEYS and "gpus" in keys:
        return ("write `gpus:`, the GPUs in the job: nodes × GPUs per node (`parasol hardware` lists each "
                "preset's GPUs per node).")
    meant = next((k for k in MEGATRON_KEY_NAMES.get(name, ()) if k in keys), None)
    if meant is not None:
        return f"write `{meant}` (Megatron's {name} is parasol's {meant})."
    near = difflib.get_close_matches(key, keys, n=1)
    return f"did you mean `{near[0]}`? Otherwise remove the key." if near else "rename the key or remove it."


def known_keys(model_cls: type[BaseModel], path: Loc) -> list[str]:
    """Field names allowed in the mapping at `path` (for 'did you mean')."""
    tp, _, _ = schema_at(model_cls, path)
    for atom in type_atoms(tp):
        if isinstance(atom, type) and issubclass(atom, BaseModel):
            return sorted(atom.model_fields)
    return []


_TYPE_TAGS = {"int", "str", "dict", "list", "float", "bool", "tuple"}


def _is_key(part: object) -> bool:
    """Whether a location part can be a key the user wrote (field names are identifiers)."""
    return isinstance(part, int) or (isinstance(part, str) and part.isidentifier() and part not in _TYPE_TAGS)


def _child(cur: Any, part: object) -> tuple[bool, Any]:
    """Whether `part` indexes the data `cur`, and the value it leads to."""
    if isinstance(cur, Mapping) and isinstance(part, str | int) and part in cur:
        return True, cur[part]
    if isinstance(cur, list | tuple) and isinstance(part, int) and 0 <= part < len(cur):
        return True, cur[part]
    return False, None


def data_path(loc: tuple, data: Any) -> Loc:
    """pydantic's error location as a path through the user's data: union-branch and validator tags
    (`constrained-int`, `list[int]`, a discriminator value) are not keys of the data and are dropped;
    a missing key is kept as the last part. Without data, identifier-like parts are kept."""
    out: list[str | int] = []
    cur = data
    for i, part in enumerate(loc):
        found, value = _child(cur, part)
        last_missing = i == len(loc) - 1 and isinstance(cur, Mapping) and isinstance(part, str)
        if found:
            out.append(part)
            cur = value
        elif (data is None or last_missing) and _is_key(part):
            out.append(part)
    return tuple(out)


def _pick(errors: list[dict], data: Any) -> dict:
    """The first error; among the branches of a union that failed there, the one that got deepest. A
    missing field next to an unknown key is most likely that key misspelt: the unknown key is reported."""
    first = errors[0]
    if first["type"] == "missing":
        parent = data_path(first["loc"], data)[:-1]
        for err in errors:
            if err["type"] == "extra_forbidden" and data_path(err["loc"], data)[:-1] == parent:
                return err
    stem = data_path(first["loc"], data)[:1]
    same = [e for e in errors if data_path(e["loc"], data)[:1] == stem]
    return max(same, key=lambda e: len(data_path(e["loc"], data)))


_EXPECTED = {
    "missing": "this required field",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "text",
    "dict_type": "a mapping of keys to values",
    "list_type": "a list",
    "tuple_type": "a list",
    "model_type": "a mapping of keys to values",
    "model_attributes_type": "a mapping of keys to values",
}
_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "number_too_large"}
_CHOICE = {"enum", "literal_error"}


def _validator_message(err: dict) -> str:
    """The text a schema validator raised, without pydantic's 'Value error, ' prefix."""
    cause = (err.get("ctx") or {}).get("error")
    return str(cause) if cause is not None else err["msg"].removeprefix("Value error, ")


_RANGE_WORDS = {"greater_than": ("gt", "greater than"), "greater_than_equal": ("ge", "at least"),
                "less_than": ("lt", "less than"), "less_than_equal": ("le", "at most")}


def _range_words(err: dict) -> str:
    """A bound as words with thousands separators: 'at most 1,048,576', 'greater than 0'."""
    key, words = _RANGE_WORDS.get(err["type"], ("", ""))
    bound = (err.get("ctx") or {}).get(key)
    if bound is None:
        return _validator_message(err).removeprefix("Input should be ")
    return f"{words} {bound:,}" if isinstance(bound, int) else f"{words} {bound}"


def _detail(err: dict, field: str, value: Any, expected: str) -> tuple[str, str]:
    """What is wrong, and the next step, for one pydantic error."""
    kind = err["type"]
    if kind in ("value_error", "assertion_error"):
        return f"Inconsistent `{field}`: {_validator_message(err)}.", f"change `{field}` so that this holds."
    if kind in _RANGE:
        return f"`{field}` must be {_range_words(err)}.", f"set `{field}` to {expected}."
    if kind in _CHOICE:
        options = re.findall(r"'([^']*)'", expected)
        near = difflib.get_close_matches(str(value), options, n=1)
        return (f"`{field}` has no option {short(value)}.",
                f"did you mean {near[0]!r}? Otherwise use one of the listed values." if near
                else "use one of the listed values.")
    if kind == "finite_number":
        return f"`{field}` must be a finite number, not {short(value)}.", f"set `{field}` to {expected}."
    if kind == "int_from_float":
        return f"`{field}` must be a whole number, not the fraction {short(value)}.", f"set `{field}` to {expected}."
    if kind == "bool_not_number":
        return (f"Wrong type for `{field}`: got true/false where a number belongs.",
                f"replace the value of `{field}` with {expected}.")
    if kind in _EXPECTED:
        return (f"Wrong type for `{field}`: got {value_kind(value)}.",
                f"replace the value of `{field}` with {expected}.")
    return f"Invalid value for `{field}`: {_validator_message(err)}.", f"correct `{field}`."


def _tag_error(err: dict, path: Loc) -> tuple[dict, Loc, str]:
    """A bad or absent discriminator (`attention.kind`) reported on the discriminator key itself."""
    ctx = err.get("ctx") or {}
    key = str(ctx.get("discriminator", "kind")).strip("'")
    tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
    expected = _choices(tags) if tags else "a known kind"
    if err["type"] == "union_tag_not_found":
        return {"type": "missing", "loc": (*path, key), "msg": "Field required"}, (*path, key), expected
    return {"type": "literal_error", "loc": (*path, key), "input": ctx.get("tag"), "msg": ""}, (*path, key), expected


def validation_input_error(
    exc: ValidationError,
    model_cls: type[BaseModel],
    data: Any = None,
    *,
    prefix: Loc = (),
    file: str | None = None,
    line_of: Callable[[Loc], int | None] | None = None,
) -> InputError:
    """The first problem pydantic found in `data` (validated as `model_cls`) as one InputError.

    `prefix` places the object in the file (("model",) for an inline model); `line_of` maps a full
    dotted location to its line in the file. Without `data` only identifier-like location parts are
    kept.
    """
    err = _pick(exc.errors(), data)
    path = data_path(err["loc"], data)
    tag_expected = None
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        err, path, tag_expected = _tag_error(err, path)
    loc = (*prefix, *path)
    field = dotted(loc) or "(top level)"
    tp, meta, desc = schema_at(model_cls, path)
    expected = tag_expected or (describe_type(tp, meta) if tp is not None
                                else _EXPECTED.get(err["type"], "a valid value"))
    value = None if err["type"] in ("missing", "extra_forbidden") else err.get("input")
    if err["type"] == "missing":
        parent = dotted(loc[:-1])
        detail = f"Missing required field `{field}`."
        fix = f"add `{loc[-1]}:` " + (f"under `{parent}`." if parent else "at the top level.")
        expected = expected + (f" ({desc})" if desc else "")
    elif err["type"] == "extra_forbidden":
        keys = known_keys(model_cls, path[:-1])
        detail = f"Unknown key `{field}`."
        expected = known_keys_text(str(path[-1]) if path else "", keys)
        options = known_keys(model_cls, OPTIONS_PATH) if tuple(path[:-1]) != OPTIONS_PATH else []
        fix = unknown_key_fix(str(path[-1]) if path else "", keys, options)
    else:
        detail, fix = _detail(err, field, value, expected)
        expected = expected + (f" ({desc})" if desc and err["type"] in _EXPECTED else "")
    return InputError(detail, field=field, value=value, expected=expected, fix=fix, file=file,
                      line=line_of(loc) if line_of else None)
