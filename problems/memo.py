"""Memo tables tied to one object's lifetime: values computed from a model or a problem once, keyed by
the object's identity (hashing a whole architecture or problem on every call costs more than the
values) and dropped when the object is collected, so a reused id never sees stale values."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_TABLES: dict[tuple[str, int], dict] = {}


def memo_table(owner: object, kind: str) -> dict:
    """The memo table for values of `kind` computed from `owner` (created empty on first use)."""
    key = (kind, id(owner))
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = {}
        weakref.finalize(owner, _TABLES.pop, key, None)
    return table


def memoised(owner: object, kind: str, build: Callable[[], T]) -> T:
    """The one value of `kind` for `owner`, built on first use."""
    table = memo_table(owner, kind)
    if kind not in table:
        table[kind] = build()
    return table[kind]


def memoised_by(owner: object, kind: str, key: object, limit: int, build: Callable[[], T]) -> T:
    """The value of `kind` for `owner` under `key`, built on first use; past `limit` values the table
    starts afresh (a search over many rows keeps its memory bounded)."""
    return kept(memo_table(owner, kind), key, limit, build)


def kept(table: dict, key: object, limit: int, build: Callable[[], T]) -> T:
    """table[key], built on first use; past `limit` values the table starts afresh: the one bounded memo
    every table of values keyed by what they read uses (memoised_by's, and module tables of values that
    read no single owner)."""
    found = table.get(key)
    if found is None:
        if len(table) >= limit:
            table.clear()
        found = table[key] = build()
    return found
