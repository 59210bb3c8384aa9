"""The row search on two cores: the rows in two halves (groups that share memory tables kept whole), the second
searched in a forked process, which starts with every memo this one built (rule domains, row listing, order),
while this one searches the first. Each search sends the steps of every row it cuts to the other, which takes
them in as dominators (row_search.RowSearch.take_shared), so each drops rows the other's cut rows beat, almost
as one search would; at the end the worker's cut rows, staircases and waiting floors join this search's
(RowSearch.absorb) before the master program.

Every row a search drops is beaten by `top` rule-feasible rows cut in one of the two, and every row cut in
either goes to the master program, so prune.py's argument holds for the rows both cut: a complete search gives
the answer one search gives, ties included, once the cut rows are in row order (RowSearch.in_row_order). Which
rows each half cuts depends on when the other's steps arrive, so the rows cut vary from run to run; the answer
does not. On the default-space problems (bench/solve_speed.py) the two cut about as many rows as one search:
DeepSeek-V3 on 2,048 GPUs takes 8.3 s instead of 13.2 s in process, Qwen3-235B on 256 3.4 s instead of 4.8 s.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import NamedTuple

from parasol.solver.search.costs import memory_key
from parasol.solver.search.row_search import Found, RowSearch, search_rows
from parasol.solver.search.space import Row

SPLIT_ROWS = 1_000
"""Fewest rows searched in two halves: below it a search takes well under a second, about what starting the
worker and sending its rows back costs."""

WAIT_S = 5.0
"""Seconds past the deadline the parent waits for its worker's answer (a worker stops at the deadline, as the
parent does, and sends its rows at once)."""

OnScreened = Callable[[int, int], None]
"""Hears (rows screened, rows listed) of the search this process runs."""


def available_cores() -> int:
    """CPU cores this process may use (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def splits(rows: int) -> bool:
    """Whether a search of `rows` rows runs in two halves: enough rows (SPLIT_ROWS), two cores here, Linux (a
    forked process starts with every memo built so far; macOS's system libraries do not survive a fork reliably,
    Windows has none), and this process no worker of another's (a sweep's sizes already share the cores)."""
    return (rows >= SPLIT_ROWS and available_cores() >= 2 and sys.platform.startswith("linux")
            and multiprocessing.parent_process() is None)


def halves(ordered: tuple[Row, ...]) -> tuple[tuple[Row, ...], tuple[Row, ...]]:
    """The rows in two halves, each in `ordered`'s order: the groups of rows that share memory tables
    (costs.memory_key: degrees, microbatch and recompute at every VPP and rank order) alternately, as they first
    come, so each half builds its groups' tables and floors once and holds its share of the most promising rows."""
    half_of: dict[tuple, int] = {}
    out: tuple[list[Row], list[Row]] = ([], [])
    for row in ordered:
        out[half_of.setdefault(memory_key(row), len(half_of) % 2)].append(row)
    return tuple(out[0]), tuple(out[1])


class _Steps(NamedTuple):
    """One row a search cut: its index there, the row, and its steps (time, memory units)."""

    index: int
    row: Row
    steps: list[tuple[int, int]]


class _Link:
    """A row_search.Peer over two pipes: steps go out on one as rows are cut, and a thread receives the other
    search's into a queue (so neither side waits on a full pipe), until its last message: what it found, or its
    error (`last`), or the pipe's end."""

    def __init__(self, inbound: Connection, outbound: Connection) -> None:
        self._out: Connection | None = outbound
        self._inbox: deque[_Steps] = deque()
        self.last: Found | BaseException | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._listen, args=(inbound,), daemon=True).start()

    def _listen(self, inbound: Connection) -> None:
        try:
            while True:
                message = inbound.recv()
                if not isinstance(message, _Steps):
                    self.last = message
                    return
                self._inbox.append(message)
        except (EOFError, OSError):
            return
        finally:
            self.ended.set()

    def send(self, index: int, row: Row, steps: list[tuple[int, int]]) -> None:
        """Send a cut row's steps (row_search.Peer); nothing once the other side has gone."""
        if self._out is not None:
            try:
                self._out.send(_Steps(index, row, steps))
            except OSError:
                self._out = None

    def take(self) -> list[tuple[int, Row, list[tuple[int, int]]]]:
        """The rows the other search cut since the last take (row_search.Peer)."""
        taken = []
        while self._inbox:
            taken.append(self._inbox.popleft())
        return taken

    def close(self) -> None:
        """Send no more: the other side's thread then sees the pipe's end."""
        if self._out is not None:
            self._out.close()
            self._out = None


def search_on_cores(search: RowSearch, fresh: Callable[[], RowSearch] | None, ordered: tuple[Row, ...],
                    deadline: float, on_screened: OnScreened | None = None) -> tuple[Row, ...]:
    """Search `ordered` (row_search.search_rows) until `deadline` in `search`: in two halves where `splits`
    allows and `fresh` is given, the second in `fresh()` in a forked process, each taking the rows the other
    cuts in as dominators as they come (RowSearch.take_shared) and the worker's absorbed into `search` at the
    end, else in one. Returns the rows left unscreened. A worker that has not answered WAIT_S past the deadline
    is stopped and its half searched here in the time left (none: its rows then count as never screened); an
    error here (an interrupt) stops it at once."""
    if fresh is None or not splits(len(ordered)):
        return ordered[search_rows(search, ordered, deadline, _listing(on_screened, len(ordered))):]
    first, second = halves(ordered)
    context = multiprocessing.get_context("fork")
    worker_reads, parent_writes = context.Pipe(duplex=False)
    parent_reads, worker_writes = context.Pipe(duplex=False)
    worker = context.Process(target=_search_half, args=(fresh, second, deadline, worker_reads, worker_writes),
                             daemon=True)
    worker.start()
    worker_reads.close()
    worker_writes.close()
    link = _Link(parent_reads, parent_writes)
    search.peer = link
    try:
        screened = search_rows(search, first, deadline, _listing(on_screened, len(first)))
    except BaseException:
        worker.terminate()
        raise
    finally:
        search.peer = None
        link.close()
        answered = link.ended.wait(max(deadline - time.perf_counter(), 0) + WAIT_S)
        if not answered:
            worker.terminate()
        worker.join()
        parent_reads.close()
    if isinstance(link.last, BaseException):
        raise link.last
    if not isinstance(link.last, Found):
        return first[screened:] + second[search_rows(search, second, deadline):]
    search.absorb(link.last)
    return first[screened:] + second[link.last.screened:]


def _listing(on_screened: OnScreened | None, listed: int) -> Callable[[int], None] | None:
    """search_rows' callback from an OnScreened, with the rows that search lists."""
    return None if on_screened is None else (lambda screened: on_screened(screened, listed))


def _search_half(fresh: Callable[[], RowSearch], rows: tuple[Row, ...], deadline: float, inbound: Connection,
                 outbound: Connection) -> None:
    """A worker's half: search `rows` in `fresh()`, sharing steps with the parent's search, and send what it
    found (RowSearch.found), or the error."""
    link = _Link(inbound, outbound)
    try:
        search = fresh()
        search.peer = link
        found = search.found(search_rows(search, rows, deadline))
        search.peer = None
        outbound.send(found)
    except BaseException as error:  # noqa: BLE001 - the parent process raises it as its own
        outbound.send(error)
    finally:
        outbound.close()
