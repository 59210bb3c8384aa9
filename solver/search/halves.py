"""The row search on two cores: the rows in two halves (groups of rows that share the dearest memos kept whole),
the second searched in a forked process, which starts with every memo this one built (rule domains, row listing,
order), while this one searches the first. The two exchange the rows they cut in lock step, every few rows
cut or EXCHANGE_POPS rows come up (row_search.RowSearch.exchange), each taking the other's in as dominators a
few exchanges behind (the split's Cadence), so each drops rows the other's cut rows beat, almost as one search
would; at the end the worker's cut rows, staircases and waiting floors join this search's (RowSearch.absorb)
before the master program.

Every row a search drops is beaten by `top` rule-feasible rows cut in one of the two, and every row cut in
either goes to the master program, so prune.py's argument holds for the rows both cut: a complete search gives
the answer one search gives, ties included, once the cut rows are in row order (RowSearch.in_row_order). What
each search takes in, and when, depends on the two searches' sequences of rows, not on their pace, so the rows
each cuts, and the counts `solve` prints, are the same on every run too. On the default-space problems
(bench/solve_speed.py) the two cut about as many rows as one search: DeepSeek-V3 on 2,048 GPUs takes 5.9 s
instead of 9.7 s in one process (session 35).
"""

from __future__ import annotations

import multiprocessing
import operator
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import NamedTuple

from parasol.solver.search.costs import memory_key
from parasol.solver.search.row_search import Found, RowSearch, Shared, search_rows
from parasol.solver.search.space import Row

SPLIT_ROWS = 64
"""Fewest rows searched in two halves. Starting the worker and sending its rows back costs about 10 ms (5T MoE on
64 devices, 8 rows: 0.01 s in one process, 0.02 s in two), and narrow spaces of a few hundred rows gain from two
cores (the bundled DeepSeek-V4-Pro problems: 8,192 GPUs, 243 rows, 0.55 s → 0.48 s; GB200 NVL72, 270 rows,
0.72 → 0.53 s; the 20 generated reference problems, 69-576 rows, 7.4-8.3 s → 6.6-6.8 s together)."""

WAIT_S = 5.0
"""Seconds past the deadline the parent waits for its worker's answer (a worker stops at the deadline, as the
parent does, and sends its rows at once)."""

class Cadence(NamedTuple):
    """How the two halves exchange: every `cuts` rows cut (or row_search.EXCHANGE_POPS rows come up), each
    taking in the other's rows `lag` exchanges behind (its k-th exchange takes the peer's (k − lag)-th), so
    neither waits for the other unless it is `lag` exchanges ahead."""

    cuts: int
    lag: int


BY_SHARED_GROUPS = Cadence(4, 8)
"""The cadence of halves cut along SHARED_KEY groups (MoE spaces): the halves hold different grids, whose cuts
cost unlike, so the exchanges leave slack (32 cuts). At lag 2 both halves of DeepSeek-V3 on 2,048 GPUs waited
about 0.5 s each; at 8 (three runs each, in process, when the lag was chosen) gpt-oss-120b took 6.4 s instead
of 6.8, the 5T MoE 10.5 instead of 11.3, Kimi K2 5.7 instead of 5.8. Every cut with lag 4 (session 48, in
process, 2-5 runs each): gpt-oss-120b 23.7 → 24.6 s, the 5T MoE 26.2 → 27.1, Qwen3-235B 10.3 → 9.7,
DeepSeek-V3, Kimi K2 and Mixtral 8x22B about the same: the halves wait for each other more than the fresher
dominators save; every 2 cuts, lag 8, no different."""
BY_TABLE_GROUPS = Cadence(1, 4)
"""The cadence of halves cut along the memory tables' groups (dense spaces, and DeepSeek-V4's, whose rules leave
few grids): the groups alternate finely, so the halves hold alike rows and cut at about the same pace, and a row
one half cuts beats the other's alike rows 4 cuts later instead of 32. Against BY_SHARED_GROUPS (session 48, in
process, two runs each): Llama 3.1 405B on 16,384 GPUs 6.18 → 5.29 s (324 → 267 rows cut), GPT-3 175B on 4,096
3.36 → 2.90 s (230 → 165), Llama 3.1 70B on 1,024 6.19 → 5.72 s (383 → 306), DeepSeek-V4-Pro on 8,192 5.80 →
5.17 s (114 → 95) and on 131,072 6.26 → 5.37 s (111 → 91), DeepSeek-V4-Flash on 32,768 13.1 s both ways
(226 → 199)."""

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


SHARED_KEY = operator.attrgetter("tp", "etp", "ep")
"""The row fields that the search's dearest memos all read: the parameter states (costs._param_states: PP, TP,
ETP and EP), the compute floors (step_time.CalibratedStageTimes._all_blocks: TP, CP, EP, ETP, MBS and recompute)
and the exchange floors rows are screened by (exchange_floor_s: the grid, rank order and MBS). Rows that share
them build those memos once, in one half."""

SHARED_GROUPS = 16
"""Fewest SHARED_KEY groups the halves are cut along: with fewer (a dense model has one per TP) the halves
could not both hold a fair share of the most promising rows, and they are cut along the memory tables' groups
(costs.memory_key) instead."""


class Halves(NamedTuple):
    """The rows of each half and the cadence the two exchange at."""

    first: tuple[Row, ...]
    second: tuple[Row, ...]
    cadence: Cadence


def halves(ordered: tuple[Row, ...]) -> Halves:
    """The rows in two halves, each in `ordered`'s order: groups of rows alternately, as they first come, so each
    half builds its groups' memos once and holds its share of the most promising rows. The groups share
    SHARED_KEY where there are at least SHARED_GROUPS of them (MoE spaces: DeepSeek-V3 on 2,048 GPUs has 80, and
    its search takes 7.9 s instead of 9.1 s on two cores; cadence BY_SHARED_GROUPS), else the memory tables
    (costs.memory_key: degrees, microbatch and recompute at every VPP and rank order; BY_TABLE_GROUPS: dense
    spaces, and DeepSeek-V4's, whose rules leave few (TP, ETP, EP) groups)."""
    shared = len({SHARED_KEY(row) for row in ordered}) >= SHARED_GROUPS
    key = SHARED_KEY if shared else memory_key
    half_of: dict[tuple, int] = {}
    out: tuple[list[Row], list[Row]] = ([], [])
    for row in ordered:
        out[half_of.setdefault(key(row), len(half_of) % 2)].append(row)
    return Halves(tuple(out[0]), tuple(out[1]), BY_SHARED_GROUPS if shared else BY_TABLE_GROUPS)


class _Tick(NamedTuple):
    """One exchange's message: the rows a search cut since its last, and whether it has ended (then it sends
    no more exchanges)."""

    cut: Shared
    ended: bool


class _Link:
    """A row_search.Peer over two pipes, in lock step at a Cadence: each exchange sends this search's rows and
    waits for the peer's message of the exchange `cadence.lag` before (at most WAIT_S past the deadline). The
    peer's last message (what it found, or its error) is kept when it comes (`last`)."""

    def __init__(self, inbound: Connection, outbound: Connection, deadline: float, cadence: Cadence) -> None:
        self._in, self._out, self._deadline = inbound, outbound, deadline
        self.cuts, self._lag = cadence.cuts, cadence.lag
        self._sent = 0
        self.peer_ended = False
        self.last: Found | BaseException | None = None

    def exchange(self, cut: Shared) -> Shared:
        """Send `cut` as this search's k-th exchange; the peer's (k − lag)-th rows, none before or once it has
        ended (row_search.Peer)."""
        if self.peer_ended:
            return []
        self._send(_Tick(cut, False))
        self._sent += 1
        if self._sent <= self._lag:
            return []
        message = self._receive()
        if message is None or message.ended:
            self.peer_ended = True
        return [] if message is None else message.cut

    def end(self, cut: Shared) -> None:
        """Send the last rows cut here and say this search has ended, so the peer waits for it no more."""
        if not self.peer_ended:
            self._send(_Tick(cut, True))

    def final(self) -> Found | BaseException | None:
        """The peer's last message, past its exchanges still on the way; None when its pipe ends first or nothing
        comes by WAIT_S past the deadline."""
        while self.last is None and self._receive() is not None:
            pass
        return self.last

    def _send(self, message: _Tick) -> None:
        try:
            self._out.send(message)
        except OSError:
            self.peer_ended = True

    def _receive(self) -> _Tick | None:
        """The peer's next exchange (None: its last message, kept in `last`, or no message in time)."""
        try:
            if not self._in.poll(max(self._deadline - time.perf_counter(), 0) + WAIT_S):
                return None
            message = self._in.recv()
        except (EOFError, OSError):
            return None
        if isinstance(message, _Tick):
            return message
        self.last = message
        return None


def search_on_cores(search: RowSearch, fresh: Callable[[], RowSearch] | None, ordered: tuple[Row, ...],
                    deadline: float, on_screened: OnScreened | None = None) -> tuple[Row, ...]:
    """Search `ordered` (row_search.search_rows) until `deadline` in `search`: in two halves where `splits`
    allows and `fresh` is given, the second in `fresh()` in a forked process, the two exchanging the rows they
    cut in lock step (RowSearch.exchange, _Link) and the worker's absorbed into `search` at the end, else in
    one. Returns the rows left unscreened. A worker that has not answered WAIT_S past the deadline
    is stopped and its half searched here in the time left (none: its rows then count as never screened); an
    error here (an interrupt) stops it at once."""
    if fresh is None or not splits(len(ordered)):
        return ordered[search_rows(search, ordered, deadline, _listing(on_screened, len(ordered))):]
    first, second, cadence = halves(ordered)
    context = multiprocessing.get_context("fork")
    worker_reads, parent_writes = context.Pipe(duplex=False)
    parent_reads, worker_writes = context.Pipe(duplex=False)
    worker = context.Process(target=_search_half,
                             args=(fresh, second, deadline, worker_reads, worker_writes, cadence), daemon=True)
    worker.start()
    worker_reads.close()
    worker_writes.close()
    link = _Link(parent_reads, parent_writes, deadline, cadence)
    search.peer = link
    try:
        screened = search_rows(search, first, deadline, _listing(on_screened, len(first)))
        link.end(search.unshared)
        found = link.final()
    except BaseException:
        worker.terminate()
        raise
    finally:
        search.peer = None
        if link.last is None:
            worker.terminate()
        worker.join()
        parent_reads.close()
        parent_writes.close()
    if isinstance(found, BaseException):
        raise found
    if not isinstance(found, Found):
        return first[screened:] + second[search_rows(search, second, deadline):]
    search.absorb(found)
    return first[screened:] + second[found.screened:]


def _listing(on_screened: OnScreened | None, listed: int) -> Callable[[int], None] | None:
    """search_rows' callback from an OnScreened, with the rows that search lists."""
    return None if on_screened is None else (lambda screened: on_screened(screened, listed))


def _search_half(fresh: Callable[[], RowSearch], rows: tuple[Row, ...], deadline: float, inbound: Connection,
                 outbound: Connection, cadence: Cadence) -> None:
    """A worker's half: search `rows` in `fresh()`, in lock step with the parent's search at `cadence`, and send
    what it found (RowSearch.found), or the error."""
    link = _Link(inbound, outbound, deadline, cadence)
    try:
        search = fresh()
        search.peer = link
        found = search.found(search_rows(search, rows, deadline))
        link.end(search.unshared)
        outbound.send(found)
    except BaseException as error:  # noqa: BLE001 - the parent process raises it as its own
        outbound.send(error)
    finally:
        outbound.close()
