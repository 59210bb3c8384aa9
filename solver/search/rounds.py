"""Exact interleaved cuts of block sequences that repeat after a short lead-in: a dynamic program over the
ranks that counts the later rounds by class instead of naming them (DeepSeek-V4 at VPP 6-16, where
fronts.py's per-round state is too large).

Round j covers blocks p_j … p_{j+1} − 1, one piece per rank in rank order. The cuts are those of the
covered family (problems/empty_stages.py): every piece of the first and last rank may hold no block, every
other piece at least one. With kinds repeating with period q from block h on, take the cuts whose round 1
starts past the lead-in (p_1 >= h). Every round j >= 1 starts at p_j >= p_1 >= h, so its pieces' kind
counts depend only on the class (residue mod q) where the round starts, R_j, and the pieces' lengths. A
rank's time and memory depend only on its total kind counts, so renumbering rounds 1 … VPP−1 changes no
rank: a cut is valid exactly when its rounds chain, R_{j+1} the class where round j ends (E_j). Read as
an edge R_j → E_j per round, the rounds 1 … VPP−1 can be put in some chaining order exactly when their
edges form an Euler trail from E_0, the class where round 0 ends. The program's state after each rank
is therefore: blocks placed, the class of round 0's front, and how many later rounds have each (start
class, front class) pair; a rank's move picks for every round a piece length (its residue mod q moves
the round's front; the whole periods are pooled, F of them, since only their total counts). The edge
ranks read their moves from a geometry whose pieces may be empty (a residue-0 piece of no period), the
others from one whose pieces hold a block; both share the states. The least largest rank cost over the
paths to a final state with an Euler trail is the least over those cuts, and the trail orders the rounds
of a cut that has it.

The cuts whose round 1 starts inside the lead-in (p_1 < h: round 0 holds as few as PP − 2 blocks, none at
PP 2) are one more case per run of rounds 0 … J−1 ending inside it (p_J < h <= p_{J+1}), few: the same
program on the blocks after p_J, its round 0 being round J, each rank holding its pieces of the run
besides. Runs of one (p_J, per-rank kind counts) differ only in their pieces' distance from even, so one
case, the evenest, serves them. A round of no block (PP 2) can be moved to the end of any cut without
changing a rank's holding or the cut's distance from even, so runs of empty rounds need no case.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from parasol.arrays import row_codes
from parasol.problems.empty_stages import evenest_cut
from parasol.solver.search.fronts import INF, Classes, Declined, Question, classes_of, least_then_evenest

CASE_LIMIT = 40
"""Most runs of rounds ending inside the lead-in (_prefixes) the program takes, at most one case each
(DeepSeek-V4's three-block lead-in: 9 at PP 2, 5 at PP 3, 1 at PP 4; a four-block one at PP 2: 33)."""
COMPOSITION_LIMIT = 20_000
"""Most ways to count the VPP − 1 later rounds over the q² (start, front) class pairs for this program
to run (q = 2: 816 at VPP 16)."""
PERIOD_LIMIT = 4
"""Longest period this program takes (q² class pairs; DeepSeek-V4 has 2, hybrid attention patterns 3-4)."""
CELL_LIMIT = 1 << 25
"""Most cells (moves × block counts) one rank's step may read; past it the question is declined."""
EDGES_KEPT = 2_000_000
"""Most moves (8 bytes each: 16 MB) a geometry keeps the live sets' positions and codes of, the least
recently asked dropped (DeepSeek-V4-Flash on 32,768 GPUs asks for about 240 live sets of up to 60,000)."""
GUESS_SHARES = (64, 16, 4)
"""A time question is first asked within its proved floor plus 1/64 of it, then, where no cut is within that, within
the floor so raised plus 1/16, then plus 1/4, before its own bound (_fastest). On DeepSeek-V4-Flash's staircases (in
one process, session 55) 1,145 of the 1,578 time questions with a floor are answered within 1/64 of it (1/128 and 1/32
cost a little more work, 1/256 much more); of the other 433, which were asked at once within their own bound (mostly
none: the evenest cut does not fit their memory cap; 1.5 s), 126 are answered within 1/16 and 101 within 1/4, and the
time questions take 2.4-2.5 s in all instead of 3.3 s."""
WINDOWS_KEPT = 8
"""Most bounds whose rank windows a case keeps."""
CODES_KEPT = 8
"""Most live sets whose every move's code a geometry keeps (only asked where CELL_LIMIT could be passed)."""
CHUNK = 1 << 21
"""Cells one slice of a rank's step reads at once (bounds the arrays' memory)."""


def lead_period(seq: tuple[int, ...]) -> tuple[int, int] | None:
    """(h, q): the period q up to PERIOD_LIMIT with the shortest lead-in h (seq[i] == seq[i + q] for i >= h),
    the shorter period on a tie; None for a sequence shorter than two blocks."""
    best: tuple[int, int] | None = None
    for q in range(1, min(PERIOD_LIMIT, len(seq) - 1) + 1):
        h = len(seq) - q
        while h > 0 and seq[h - 1] == seq[h - 1 + q]:
            h -= 1
        if best is None or h < best[0]:
            best = (h, q)
    return best


@functools.lru_cache(maxsize=32)
def _compositions(total: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every tuple of `parts` non-negative counts summing to `total`, in lexicographic order."""
    out = []
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *bars, total + parts - 1)
        out.append(tuple(edges[i + 1] - edges[i] - 1 for i in range(parts)))
    return tuple(sorted(out))


def trail_exists(pairs: tuple[int, ...], q: int, start: int) -> bool:
    """Whether edges R → E, counted per pair in `pairs` (index R·q + E), form one Euler trail from `start`
    (a trail using every edge once): the degree balance and every edge's nodes connected to `start`."""
    count = np.array(pairs, dtype=np.int64).reshape(q, q)
    if not count.sum():
        return True
    diff = count.sum(axis=1) - count.sum(axis=0)
    if diff[start] == 1:
        if sorted(diff.tolist()) != [-1] + [0] * (q - 2) + [1]:
            return False
    elif diff.any():
        return False
    linked = count + count.T > 0
    seen, todo = {start}, [start]
    while todo:
        u = todo.pop()
        for w in np.flatnonzero(linked[u]).tolist():
            if w not in seen:
                seen.add(w)
                todo.append(w)
    used = np.flatnonzero(linked.any(axis=1))
    return bool(all(int(u) in seen for u in used)) and (bool(linked[start].any()) or not len(used))


@dataclass(frozen=True)
class _Layer:
    """One rank's step of a pass: the values before it (states × blocks placed) and its edges (destination
    and cost), with where they are among the expanded states' moves (`joined`) for the rest."""

    values: np.ndarray
    dst: np.ndarray
    cost: np.ndarray
    pick: np.ndarray
    joined: _Joined


class _Rounds:
    """The later rounds of one VPP and period: their counts over the q² (start, front) class pairs and each
    count's options for one rank, shared by every geometry with that VPP and period's kinds (a row's ranks,
    the tails of its cases that keep the period, the rows of a problem)."""

    def __init__(self, vpp: int, q: int, content: np.ndarray) -> None:
        self.vpp, self.q = vpp, q
        self.content = content
        """content[f, ρ]: kind counts of the ρ blocks from residue f of the period."""
        self.comps = _compositions(vpp - 1, q * q)
        self.codes = np.array([sum(x * vpp ** i for i, x in enumerate(c)) for c in self.comps], dtype=np.int64)
        self.order = np.argsort(self.codes)
        self.later_of: dict[int, tuple[np.ndarray, ...]] = {}
        self.effects_of: dict[tuple[int, int], np.ndarray] = {}

    @functools.cached_property
    def trails(self) -> np.ndarray:
        """trails[comp, s]: whether the later rounds counted by comp chain from round 0 ending at class s."""
        return np.array([[trail_exists(c, self.q, s) for s in range(self.q)] for c in self.comps], dtype=bool)

    @functools.cached_property
    def openers(self) -> np.ndarray:
        """The round counts a program starts from: every later round starting and ending at one class."""
        q = self.q
        return np.array([i for i, c in enumerate(self.comps)
                         if all(c[s * q + e] == 0 for s in range(q) for e in range(q) if s != e)], dtype=np.int64)

    def comp_of(self, after: np.ndarray) -> np.ndarray:
        """The indices of round-count vectors (rows of `after`) among the compositions."""
        codes = after @ (self.vpp ** np.arange(self.q * self.q, dtype=np.int64))
        return self.order[np.searchsorted(self.codes[self.order], codes)]

    def later(self, comp: int) -> tuple[np.ndarray, ...]:
        """The later rounds' options for one rank from round counts comp: for each (start, front) pair, how
        many of its rounds take a piece of each residue (an index into _compositions(count, q)); (counts
        after, kind counts, blocks, pieces of each residue, each option's index among every pair's choices
        (`picked`)) at each piece's residue alone, one per distinct effect."""
        if comp not in self.later_of:
            pairs, groups = self.q * self.q, self.content.shape[2]
            effect = np.zeros((1, pairs + groups + 1 + self.q), dtype=np.int64)
            for pair, count in enumerate(self.comps[comp]):
                effect = (effect[:, None, :] + self._pair_effects(pair, count)[None, :, :]).reshape(-1, effect.shape[1])
            keep = np.sort(np.unique(row_codes(effect), return_index=True)[1])
            effect = effect[keep]
            self.later_of[comp] = (self.comp_of(effect[:, :pairs]), effect[:, pairs:pairs + groups],
                                   effect[:, pairs + groups], effect[:, pairs + groups + 1:], keep)
        return self.later_of[comp]

    def _pair_effects(self, pair: int, count: int) -> np.ndarray:
        """What each way for `count` rounds of one (start, front) pair to take a piece of each residue
        (_compositions(count, q), in order) adds to a rank: the rounds it leaves on each pair after it, its kind
        counts, blocks and pieces of each residue, as one row (later's options are sums of one row per pair, and
        the counts after determine the counts' index, so the options alike in these rows are alike in later's);
        once per pair and count."""
        if (pair, count) not in self.effects_of:
            q = self.q
            start, front = divmod(pair, q)
            split = np.array(_compositions(count, q), dtype=np.int64).reshape(-1, q)
            moved = np.zeros((len(split), q * q), dtype=np.int64)
            for rho in range(q):
                moved[:, start * q + (front + rho) % q] += split[:, rho]
            self.effects_of[pair, count] = np.concatenate(
                [moved, split @ self.content[front], (split @ np.arange(q))[:, None], split], axis=1)
        return self.effects_of[pair, count]

    def picked(self, comp: int, option: int) -> tuple[int, ...]:
        """The choice of each (start, front) pair (an index into _compositions(count, q)) that later's option
        `option` from round counts comp makes: its index among the pairs' choices read in mixed radix."""
        choices = [len(_compositions(count, self.q)) for count in self.comps[comp]]
        return tuple(int(x) for x in np.unravel_index(int(self.later(comp)[4][option]), choices))


@functools.lru_cache(maxsize=16)
def _rounds(vpp: int, q: int, content: bytes, groups: int) -> _Rounds:
    """The shared later rounds of a VPP and a period whose residues' kind counts are `content` (int64, q × q ×
    groups)."""
    return _Rounds(vpp, q, np.frombuffer(content, dtype=np.int64).reshape(q, q, groups))


class _Geometry:
    """What the program needs of a row's block sequence and shape alone (shared by every row of a problem
    with that sequence grouping, PP and VPP, and by its ranks whose pieces have one least length, the last
    rank apart): the round counts, each state's moves and their expansions."""

    def __init__(self, seq: tuple[int, ...], groups: int, pp: int, vpp: int, h: int, q: int,
                 whole: tuple[int, int], least: int, longest: int, closing: bool) -> None:
        self.pp, self.vpp, self.n, self.h, self.q = pp, vpp, len(seq), h, q
        self.whole = whole
        """(stages, blocks) of the whole cut, for the pieces' distance from even (a case's sequence may be its
        tail)."""
        self.least = least
        """The fewest blocks each of a rank's pieces holds: 1, or 0 on an edge rank (empty_stages.least_piece)."""
        self.longest = longest
        """The most blocks a rank holds: what the other ranks leave when each holds its least."""
        self.closing = closing
        """Whether only moves into final states are expanded (the last rank's: no other is read)."""
        self.reach = 0
        """The most blocks of the moves a state is expanded to: widened as questions ask (`edges`), since a rank
        mostly holds far fewer within a question's bounds than the longest rank (whose moves cost the most to
        expand)."""
        self.cl: Classes = classes_of(seq, groups, h, q)
        self.rounds = _rounds(vpp, q, self.cl.content[h:h + q, :q].tobytes(), groups)
        """The later rounds' counts and options, shared by every geometry of this VPP and period."""
        self.comps = self.rounds.comps
        self.classes = h + q
        self.period = self.cl.content[h, q]
        self.total = np.bincount(np.array(seq, dtype=np.int64), minlength=groups).astype(np.int64)
        self.place = np.cumprod(np.concatenate([[1], self.total[:-1] + 1])).astype(np.int64)
        self.code_type = np.int32 if int(self.place[-1] * (self.total[-1] + 1)) < 1 << 31 else np.int64
        """The narrowest type that holds every kind-count code."""
        self.expanded = np.full(self.classes * len(self.comps), -1, dtype=np.int64)
        """Per state, the most blocks of its moves in `joined` (−1: none yet); a state short of `reach` gains its
        longer moves alone when next asked for."""
        self.joined = _Joined(*(np.zeros(n, dtype=np.int64) for n in ((0,), (6, 0), (0,))))
        """The moves of every expanded state (expand), with each number of pooled periods, together."""
        self.by_blocks = (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32),
                          np.zeros(0, dtype=self.code_type), np.zeros(self.longest + 2, dtype=np.int64))
        """`joined`'s moves ordered by blocks (then as in `joined`): their positions in it, sources and codes, and
        where the moves of each number of blocks b = 0 … longest + 1 start among them."""
        self.moves_of = np.zeros(self.classes * len(self.comps), dtype=np.int64)
        """Per state, how many moves it has in `joined`."""
        self.live_of: dict[tuple[bytes, int, int], tuple[np.ndarray, np.ndarray, int]] = {}
        """Per live set and range of blocks, where its states' moves of those blocks are in `joined` (in its order)
        and their codes (edges), and the live states' moves of any blocks; the latest few, dropped when `joined` grows."""
        self.kept = 0
        """Moves held in live_of."""
        self.codes_of: dict[bytes, np.ndarray] = {}
        """live_codes' answers by live set, the latest CODES_KEPT, dropped when `joined` grows."""
        self.spread_of: dict[tuple[tuple[int, ...], int, int, int], int] = {}
        self.later_of: dict[int, tuple] = {}
        self.first_of: dict[int, tuple] = {}

    @functools.cached_property
    def final(self) -> np.ndarray:
        """By state, whether a cut can end in it: round 0 past the lead-in, the later rounds chaining from its end."""
        nc = len(self.comps)
        final = np.zeros(self.classes * nc, dtype=bool)
        final.reshape(self.classes, nc)[self.h:, :] = self.rounds.trails.T
        return final

    def first(self, c0: int) -> tuple:
        """Round 0's options from a front at class c0: (class after, kind counts, blocks, periods needed,
        pieces of each residue whose periods are pooled, the length of a piece taken whole (−1 when none),
        the starting length of a lead-in piece whose periods are pooled (0 when none), what each is). Before
        h: a piece ending inside the lead-in ("length", L, from the least piece up), or one running past it
        ("lead", L: the rest of the lead-in and a residue, more periods pooled); after h: ("residue", ρ),
        its periods pooled."""
        if c0 not in self.first_of:
            cl, h, q = self.cl, self.h, self.q
            if c0 < h:
                inside = list(range(self.least, h - c0))
                past = [h - c0 + rho for rho in range(q)]
                lengths = inside + past
                opts = ([int(cl.exit[c0, L]) for L in lengths], [cl.content[c0, L] for L in lengths], lengths,
                        [0] * len(lengths), [[0] * q for _ in lengths], inside + [-1] * q, [0] * len(inside) + past,
                        [("length", L) for L in inside] + [("lead", L) for L in past])
            else:
                opts = ([h + (c0 - h + rho) % q for rho in range(q)], [cl.content[c0, rho] for rho in range(q)],
                        list(range(q)), [int(rho == 0) * self.least for rho in range(q)],
                        np.eye(q, dtype=np.int64).tolist(), [-1] * q, [0] * q, [("residue", rho) for rho in range(q)])
            count = len(opts[0])
            self.first_of[c0] = (*(np.array(x, dtype=np.int64).reshape(count, -1) if i in (1, 4)
                                   else np.array(x, dtype=np.int64) for i, x in enumerate(opts[:7])), opts[7])
        return self.first_of[c0]

    def later(self, comp: int) -> tuple[np.ndarray, ...]:
        """_Rounds.later's options from round counts comp, with the periods each needs: (counts after, kind counts,
        blocks, periods needed (one per residue-0 piece when pieces hold a block), pieces of each residue)."""
        if comp not in self.later_of:
            dst, vec, size, hist, _ = self.rounds.later(comp)
            self.later_of[comp] = (dst, vec, size, hist[:, 0] * self.least, hist)
        return self.later_of[comp]

    def moves(self, states: list[int]) -> tuple[np.ndarray, ...]:
        """The moves of one rank from each of `states` (c0 · comps + comp) that keep it within `reach` blocks at
        their least pooled periods and within the model's kind totals (with `closing`, ending in a final state):
        of each round-0 option with each later-rounds one, a state's moves in that order (move k pairs round-0
        option k // b with later option k % b, b later options: `detail`); (owner among `states`, k, destination
        state, the rank's kind counts less its pooled periods, blocks less the pooled periods, the least number
        of pooled periods, pieces of each residue whose periods are pooled, the length of a round-0 piece taken
        whole (−1 when pooled too), the starting length of a round-0 lead-in piece whose periods are pooled (0
        when none)). The bounds are read first, on the columns they need, so the other columns are gathered
        only for the moves kept (about one in seven on DeepSeek-V4-Flash)."""
        nc = len(self.comps)
        c0s, comps = np.divmod(np.array(states, dtype=np.int64), nc)
        firsts = {c: self.first(c)[:7] for c in dict.fromkeys(c0s.tolist())}
        laters = {c: self.later(c) for c in dict.fromkeys(comps.tolist())}
        f_tables, f_start, f_count = _stacked(firsts, c0s)
        l_tables, l_start, l_count = _stacked(laters, comps)
        count = f_count * l_count
        owner = np.repeat(np.arange(len(states)), count)
        index = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        b = l_count[owner]
        f, later = f_start[owner] + index // b, l_start[owner] + index % b
        dst = f_tables[0].take(f) * nc + l_tables[0].take(later)
        blocks = f_tables[2].take(f) + l_tables[2].take(later)
        least = f_tables[3].take(f) + l_tables[3].take(later)
        keep = blocks + self.q * least <= self.reach
        if self.closing:
            keep &= self.final.take(dst)
        owner, index, f, later, dst, blocks, least = (x[keep] for x in (owner, index, f, later, dst, blocks, least))
        vec = f_tables[1][f] + l_tables[1][later]
        keep = (vec <= self.total).all(axis=1)
        owner, index, f, later, dst, blocks, least, vec = (
            x[keep] for x in (owner, index, f, later, dst, blocks, least, vec))
        return (owner, index, dst, vec, blocks, least, f_tables[4][f] + l_tables[4][later], f_tables[5].take(f),
                f_tables[6].take(f))

    def detail(self, state: int, index: int) -> tuple[int, int]:
        """(round-0 option, later-rounds option) of move `index` of `state` (moves' order)."""
        return divmod(index, len(self.later(state % len(self.comps))[0]))

    def shortest(self, rho: int) -> int:
        """The shortest piece of residue ρ: ρ blocks, or for residue 0 one period where pieces hold a block."""
        return rho + self.q * self.least * (rho == 0)

    def spread(self, hist: tuple[int, ...], fixed: int, lead: int, extra: int) -> int:
        """Σ |length · stages − n| over one rank's pieces at their evenest: `hist` pieces of each residue (each
        at its shortest) and a lead-in piece starting at `lead` blocks (none when 0) get `extra` more periods,
        each to a shortest piece; a piece taken whole has length `fixed` (none when −1)."""
        key = (hist, fixed, lead, extra)
        if key not in self.spread_of:
            (stages, whole), q = self.whole, self.q
            sizes = [self.shortest(rho) for rho, m in enumerate(hist) for _ in range(m)] + ([lead] if lead else [])
            heapq.heapify(sizes)
            for _ in range(extra):
                heapq.heappush(sizes, heapq.heappop(sizes) + q)
            self.spread_of[key] = (sum(abs(x * stages - whole) for x in sizes)
                                   + (abs(fixed * stages - whole) if fixed >= 0 else 0))
        return self.spread_of[key]

    def _spreads(self, move: np.ndarray, extra: np.ndarray, hist: np.ndarray, fixed: np.ndarray,
                 lead: np.ndarray) -> np.ndarray:
        """`spread` of each expanded move (moves' rows `move`, `extra` periods past their least), priced once per
        distinct (pieces, piece taken whole, lead-in piece, extra periods): the moves' own shapes are told apart
        first (fewer rows than their expansions), then paired with the extra periods."""
        _, one, shape = np.unique(row_codes(np.concatenate([hist, fixed[:, None] + 1, lead[:, None]], axis=1)),
                                  return_index=True, return_inverse=True)
        extras = int(extra.max(initial=0)) + 1
        pair = shape.ravel()[move] * extras + extra
        seen = np.zeros(len(one) * extras, dtype=bool)
        seen[pair] = True
        shapes, more = np.divmod(np.flatnonzero(seen), extras)
        at = one[shapes]
        table = np.zeros(len(seen), dtype=np.int64)
        table[seen] = [self.spread(tuple(h), f, ld, x) for h, f, ld, x in
                       zip(hist[at].tolist(), fixed[at].tolist(), lead[at].tolist(), more.tolist(), strict=True)]
        return table[pair]

    def expand(self, states: list[int]) -> None:
        """Every move from each of `states` with each number of pooled periods that keeps the rank within
        `reach` blocks and the model's kind totals (and with `closing`, ends in a final state), one per
        (destination, blocks, kind counts), kept per state as (dst, blocks, code of the kind counts, move index,
        periods, spread: the evenest of those alike, the first in move order among equals); all states in one
        pass. A state already expanded to fewer blocks gains its longer moves alone: its moves are then those one
        expansion to `reach` gives, in the same order."""
        owner, index, dst, vec, blocks, least, hist, fixed, lead = self.moves(states)
        done = self.expanded.take(np.array(states, dtype=np.int64))
        periods = np.arange(self.reach // self.q + 1)
        room = np.where(self.period > 0, (self.total - vec) // np.maximum(self.period, 1), self.reach)
        top = np.minimum(room.min(axis=1), (self.reach - blocks) // self.q)
        top = np.where((hist.sum(axis=1) > 0) | (lead > 0), top, np.minimum(top, 0))
        move, k = np.nonzero((periods[None, :] >= least[:, None]) & (periods[None, :] <= top[:, None])
                             & (blocks[:, None] + self.q * periods[None, :] > done[owner][:, None]))
        size = blocks[move] + self.q * k
        code = (vec @ self.place)[move] + k * int(self.period @ self.place)
        base = self.longest + 1
        spread = self._spreads(move, k - least[move], hist, fixed, lead)
        key = ((owner[move] * (self.classes * len(self.comps)) + dst[move]) * (self.longest + 1) + size) \
            * int(self.place[-1] * (self.total[-1] + 1)) + code
        scale = int(spread.max(initial=0)) + 1
        if (len(states) * self.classes * len(self.comps) * base * int(self.place[-1] * (self.total[-1] + 1))
                < (1 << 62) // scale):
            evenest = np.argsort(key * scale + spread, kind="stable")
        else:
            evenest = np.lexsort((spread, key))
        ordered = key[evenest]
        first = np.sort(evenest[np.concatenate(([True], ordered[1:] != ordered[:-1]))[:len(ordered)]])
        move, k, size, code, spread = move[first], k[first], size[first], code[first], spread[first]
        self.expanded[states] = self.reach
        src, rows = _merged(self.joined, np.array(states, dtype=np.int64)[owner[move]],
                            np.stack([dst[move], size, code, index[move], periods[k], spread]), len(self.expanded))
        self.joined = _Joined(src, rows, src * (2 * self.n + 2) + self.n + 1 - rows[1])
        by_blocks = np.argsort(rows[1].astype(np.int16), kind="stable")
        self.by_blocks = (by_blocks.astype(np.int32), src.take(by_blocks).astype(np.int32),
                          rows[2].take(by_blocks).astype(self.code_type),
                          np.searchsorted(rows[1].take(by_blocks), np.arange(self.longest + 2)))
        self.moves_of = np.bincount(src, minlength=len(self.expanded))
        self.live_of.clear()
        self.kept = 0
        self.codes_of.clear()

    def edges(self, live: np.ndarray, least: int, most: int) -> tuple[_Joined, np.ndarray, np.ndarray, int]:
        """The moves of every expanded state (`joined`, the `live` states expanded first to `reach` when they are
        not yet, `reach` widened first to `most` blocks when it falls short), and the live states' moves of
        `least` … `most` blocks: where they are in `joined`, in its order, their codes, and how many moves of any
        blocks the live states have; the latest few live sets' kept (ranks ask for the same ones question after
        question; a kept set's states are expanded to `reach`, as `expand` drops them)."""
        if most > self.reach:
            self._widen(most)
        key = (live.tobytes(), least, most)
        found = self.live_of.pop(key, None)
        if found is None:
            self._expanded(live)
            order, sources, codes, starts = self.by_blocks
            part = slice(starts[least], starts[most + 1]) if least <= most else slice(0, 0)
            where = np.sort(order[part][self._inside(live).take(sources[part])])
            found = (where, self.joined.rows[2].take(where).astype(self.code_type), int(self.moves_of.take(live).sum()))
            while self.live_of and self.kept + len(found[0]) > EDGES_KEPT:
                self.kept -= len(self.live_of.pop(next(iter(self.live_of)))[0])
            self.kept += len(found[0])
        self.live_of[key] = found
        return self.joined, *found

    def live_codes(self, live: np.ndarray) -> np.ndarray:
        """The codes of every move of the `live` states (expanded), of any blocks; the latest CODES_KEPT live sets'
        kept (ranks ask for the same ones question after question)."""
        key = live.tobytes()
        if key not in self.codes_of:
            if len(self.codes_of) >= CODES_KEPT:
                self.codes_of.pop(next(iter(self.codes_of)))
            _, sources, codes, _ = self.by_blocks
            self.codes_of[key] = codes[self._inside(live).take(sources)]
        return self.codes_of[key]

    def _widen(self, most: int) -> None:
        """Let moves reach `most` blocks, half as many again as they reached at least (up to the longest rank, so
        that a few wider questions widen it a few times); states gain their longer moves as they are asked for
        (the kept live sets are dropped: their states fall short)."""
        self.reach = min(self.longest, max(most, self.reach + self.reach // 2))
        self.live_of.clear()
        self.kept = 0
        self.codes_of.clear()

    def _expanded(self, live: np.ndarray) -> None:
        """Expand the `live` states not yet expanded to `reach`."""
        short = self.expanded.take(live) < self.reach
        if short.any():
            self.expand(live[short].tolist())

    def _inside(self, live: np.ndarray) -> np.ndarray:
        """By state, whether it is among `live`."""
        inside = np.zeros(len(self.expanded), dtype=bool)
        inside[live] = True
        return inside


@dataclass(frozen=True)
class _Joined:
    """The expanded moves of a set of states, sorted by destination, then source, then the order expand gave
    them: their sources, their rows (dst, blocks, code, move index, periods, spread), and where each reads
    its source's values in _Case._step (source · (2n + 2) + n + 1 − blocks). The moves of any subset of the
    states, in this order, are those of the subset sorted alike."""

    src: np.ndarray
    rows: np.ndarray
    read: np.ndarray


def _merged(joined: _Joined, src: np.ndarray, rows: np.ndarray, states: int) -> tuple[np.ndarray, np.ndarray]:
    """`joined`'s moves with new ones (their sources and rows) in its order: by destination, then source, then move
    index and periods (rows 0, 3 and 4), which tell every move of a geometry apart. The new moves are sorted alone
    and inserted where they go, one mixed-radix key per move, unless that key passes int64 (then all are sorted
    again)."""
    old_src, old_rows = joined.src, joined.rows
    moves = int(max(old_rows[3].max(initial=0), rows[3].max(initial=0))) + 1
    periods = int(max(old_rows[4].max(initial=0), rows[4].max(initial=0))) + 1
    if states * states * moves * periods >= 1 << 62:
        src, rows = np.concatenate([old_src, src]), np.concatenate([old_rows, rows], axis=1)
        order = np.lexsort((rows[4], rows[3], src, rows[0]))
        return src[order], np.take(rows, order, axis=1)

    def key(src: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return ((rows[0] * states + src) * moves + rows[3]) * periods + rows[4]

    new = key(src, rows)
    order = np.argsort(new)
    at = np.searchsorted(key(old_src, old_rows), new[order]) + np.arange(len(new))
    was_old = np.ones(len(old_src) + len(new), dtype=bool)
    was_old[at] = False
    stays = np.flatnonzero(was_old)
    merged = np.empty((len(rows) + 1, len(was_old)), dtype=np.int64)
    for to, added, held in zip(merged, (src, *rows), (old_src, *old_rows), strict=True):
        to[at], to[stays] = added.take(order), held
    return merged[0], merged[1:]


def _stacked(options: dict[int, tuple[np.ndarray, ...]], keys: np.ndarray
             ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Per-key option tables (first or later) stacked: each table's rows of every key in `options`' order, and
    for each of `keys` where its rows start and how many there are."""
    tables = [np.concatenate(x) for x in zip(*options.values(), strict=True)]
    sizes = np.array([len(x[0]) for x in options.values()], dtype=np.int64)
    at = {key: i for i, key in enumerate(options)}
    which = np.array([at[key] for key in keys.tolist()], dtype=np.int64)
    return tables, (np.cumsum(sizes) - sizes)[which], sizes[which]


@functools.lru_cache(maxsize=256)
def _geometry(seq: tuple[int, ...], groups: int, pp: int, vpp: int, h: int, q: int, whole: tuple[int, int],
              least: int, longest: int, closing: bool) -> _Geometry:
    """The shared geometry of a sequence grouping, PP, VPP, least piece and closing (rows of one problem ask for
    the same ones: DeepSeek-V4-Flash's default space on 32,768 GPUs asks for 108, and a cache of 64 rebuilt 159
    of them, their expansions with them)."""
    return _Geometry(seq, groups, pp, vpp, h, q, whole, least, longest, closing)


def _shape(seq: tuple[int, ...], vpp: int) -> tuple[int, int] | None:
    """lead_period's (h, q) of `seq` when the program takes it: few enough round counts for `vpp` rounds."""
    found = lead_period(seq)
    if found is None or math.comb(vpp + found[1] ** 2 - 2, found[1] ** 2 - 1) > COMPOSITION_LIMIT:
        return None
    return found


def _below(question: Question, value: int) -> Question:
    """The question with its objective's bound lowered below `value` (a least-value pass; the evenness pass,
    whose value is a spread, as it is). A bound at or above a case's least leaves its least and traced cut
    as they are (every cut of the least, and every partial cut on one, is within it), and a case with
    nothing below `value` answers none."""
    if question.within is not None:
        return question
    if question.minimise_time:
        return Question(min(question.slowest_us, value - 1), question.cap_mb, True, None)
    return Question(question.slowest_us, min(question.cap_mb, value - 1), False, None)


def _openings(pp: int, h: int, most: int) -> list[tuple[int, ...]] | None:
    """Every round 0 of PP pieces of at least one block ending inside a lead-in of h blocks (so round 1 starts in
    it); None when there are more than `most`, counted (C(h − 1, PP): PP pieces of a total below h), not listed:
    a long lead-in at a short PP has millions (Nemotron-3 Nano's hybrid blocks)."""
    if math.comb(max(h - 1, 0), pp) > most:
        return None
    return [parts for total in range(pp, h) for parts in (
        tuple(b - a for a, b in itertools.pairwise((0, *cut, total)))
        for cut in itertools.combinations(range(1, total), pp - 1))]


def _prefixes(least: tuple[int, ...], h: int, rounds: int, most: int) -> list[tuple[int, ...]] | None:
    """Every run of 1 … `rounds` rounds, each of at least one block, piece r of each at least least[r] blocks,
    that ends inside a lead-in of h blocks, as its pieces in stage order; None when there are more than `most`.
    A round's pieces x_r >= least[r] with a total below the ℓ blocks of lead-in left are _openings' rounds of
    pieces x_r − least[r] + 1 within ℓ − Σ least + PP, so no listing passes the limit (counted first)."""
    pp, spare = len(least), sum(least)
    out: list[tuple[int, ...]] = []
    todo: list[tuple[int, ...]] = [()]
    while todo:
        run = todo.pop()
        if len(run) == rounds * pp:
            continue
        listed = _openings(pp, h - sum(run) - spare + pp, most + 1)
        if listed is None:
            return None
        for parts in listed:
            pieces = tuple(y - 1 + x for y, x in zip(parts, least, strict=True))
            if sum(pieces):
                out.append(run + pieces)
                todo.append(run + pieces)
        if len(out) > most:
            return None
    return sorted(out, key=lambda run: (len(run), run))


class _Case:
    """The program over the cuts whose round 1 starts past the lead-in (`prefix` empty), or over those whose
    first rounds are `prefix` (_prefixes: its pieces in stage order) and whose later rounds run on the tail
    after it (the round after it as this case's round 0), each rank holding its prefix pieces besides."""

    def __init__(self, cuts, seq: tuple[int, ...], shape: tuple[int, int], prefix: tuple[int, ...],  # noqa: ANN001
                 offsets: np.ndarray) -> None:
        self.cuts, self.prefix, self.offsets = cuts, prefix, offsets
        self.pp = cuts.pp
        self.vpp = cuts.vpp - len(prefix) // self.pp
        self.n = len(seq)
        self.h, self.q = shape
        whole = (cuts.pp * cuts.vpp, cuts.n)
        self.least = [cuts.least[r] * self.vpp for r in range(self.pp)]
        """The fewest blocks each rank holds in the tail."""
        self.longest = [self.n - sum(self.least) + x for x in self.least]
        """The most blocks each rank holds in the tail: what the others leave holding their least."""
        self.ranks = [_geometry(seq, len(cuts.relaxed.groups), self.pp, self.vpp, self.h, self.q, whole,
                                cuts.least[r], self.longest[r], r == self.pp - 1) for r in range(self.pp)]
        """Each rank's geometry: the edge ranks' pieces may be empty, the others' hold a block; the last rank's
        moves end in final states."""
        self.g = self.ranks[0]
        """What every rank's geometry shares: classes, round counts, kind totals."""
        self.comps, self.cl = self.g.comps, self.g.cl
        self.spread0 = sum(abs(x * whole[0] - whole[1]) for x in prefix)
        """The prefix pieces' distance from even."""
        self.windows_of: dict[tuple[int, int], tuple[list[tuple[int, int]], list[tuple[int, int]], np.ndarray] | None] = {}
        """_windows' answers by bounds, the latest WINDOWS_KEPT."""

    @functools.cached_property
    def blocks(self) -> np.ndarray:
        """Blocks in each kind-count vector, by code (as `priced`)."""
        shape = tuple(int(t) + 1 for t in self.g.total)
        vectors = np.indices(shape).reshape(len(shape), -1).T.astype(np.int64)
        return vectors.sum(axis=1)[np.argsort(vectors @ self.g.place)]

    @functools.cached_property
    def _holdable_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """By rank and code, the blocks of the kind counts a rank can hold (its least to its longest), else n + 1
        (first) or −1 (second): what _placed's least and most read."""
        least, longest = (np.array(x, dtype=np.int64)[:, None] for x in (self.least, self.longest))
        holdable = (self.blocks[None, :] >= least) & (self.blocks[None, :] <= longest)
        return np.where(holdable, self.blocks, self.n + 1), np.where(holdable, self.blocks, -1)

    @functools.cached_property
    def priced(self) -> tuple[np.ndarray, np.ndarray]:
        """Time (µs) and memory (MB) of every rank (rows) holding each kind-count vector up to the sequence's
        totals (columns, by code: vector @ place) besides its prefix piece."""
        shape = tuple(int(t) + 1 for t in self.g.total)
        vectors = np.indices(shape).reshape(len(shape), -1).T.astype(np.int64)
        vectors = vectors[np.argsort(vectors @ self.g.place)]
        if not self.offsets.any():
            return self.cuts.relaxed.costs(vectors)
        time = np.empty((self.pp, len(vectors)), dtype=np.int64)
        memory = np.empty((self.pp, len(vectors)), dtype=np.int64)
        for r, offset in enumerate(self.offsets):
            t, m = self.cuts.relaxed.costs(vectors + offset)
            time[r], memory[r] = t[r], m[r]
        return time, memory

    def _edges(self, r: int, live: np.ndarray, question: Question, fit: np.ndarray, window: tuple[int, int],
               before: tuple[int, int], held: tuple[int, int]) -> tuple | None:
        """Rank r's edges into blocks placed within `window` from the live states within both bounds (`fit`: by
        code, whether rank r holding it is; with `within` set, objective within it too), sorted by destination:
        (where each reads its source's values in _step, dst, score: the objective, or with `within` the spread,
        their indices among the expanded states' moves, those moves). Only moves whose blocks can reach the
        window from the window `before` and that the rank can hold within the bounds (`held`: the fewest and most
        blocks of the kind counts it can) are taken (any other reads no finite value in _step or does not fit);
        None when none is (no cut is then). Raises Declined when the fitting moves times the window's blocks
        placed pass CELL_LIMIT."""
        lo, hi = window
        g = self.ranks[r]
        least, most = max(lo - before[1], held[0]), min(hi - before[0], held[1])
        if hi < lo or most < least:
            return None
        joined, where, code, moves = g.edges(live, least, most)
        objective = self.priced[0][r] if question.minimise_time else self.priced[1][r]
        if question.within is not None:
            fit = fit & (objective <= question.within)
        if moves * (hi - lo + 1) > CELL_LIMIT:
            count = int(np.count_nonzero(fit.take(g.live_codes(live))))
            if not count:
                return None
            if count * (hi - lo + 1) > CELL_LIMIT:
                raise Declined
        pick = where[fit.take(code)]
        if not len(pick):
            return None
        cost = objective.take(joined.rows[2].take(pick)) if question.within is None else joined.rows[5].take(pick)
        return joined.read.take(pick), joined.rows[0].take(pick), cost, pick, joined

    def program(self, question: Question, trace: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """The dynamic program over the ranks: the least largest rank objective (`within` None) or the least
        total spread of moves within `within` (the prefix's included), and a whole cut that has it (without
        `trace`, an empty cut: the value alone). A state's values by blocks placed p are at column n + 1 + p,
        INF to the left, so that a move of more blocks than its source has placed reads INF. Only the live
        states' rows are set (the next rank's moves and the trace read no other)."""
        n, pp, nc = self.n, self.pp, len(self.comps)
        add = question.within is not None
        found = self._windows(question.slowest_us, question.cap_mb)
        if found is None:
            return None
        windows, held, fits = found
        if any(hi < lo for lo, hi in windows):
            return None
        live = self.g.rounds.openers + self.cl.of(0) * nc
        values = np.empty((self.g.classes * nc, 2 * n + 2), dtype=np.int64)
        values[live] = INF
        values[live, n + 1] = 0
        layers: list[_Layer] = []
        before = (0, 0)
        for r in range(pp):
            if self.cuts.late():
                raise Declined
            if not len(live):
                return None
            lo, hi = windows[r]
            edges = self._edges(r, live, question, fits[r], (lo, hi), before, held[r])
            if edges is None:
                return None
            start, dst, cost, pick, joined = edges
            layers.append(_Layer(values, dst, cost, pick, joined))
            values, live = self._step(values, start, dst, cost, lo, hi, add)
            before = (lo, hi)
        final = np.full(self.g.classes * nc, INF, dtype=np.int64)
        final[live] = values[live, 2 * n + 1]
        final = final.reshape(self.g.classes, nc)[self.h:, :].T
        final = np.where(self.g.rounds.trails, final, INF)
        value = int(final.min())
        if value >= INF:
            return None
        if not trace:
            return value + (self.spread0 if add else 0), ()
        comp, end = np.unravel_index(int(np.argmin(final)), final.shape)
        cut = self.prefix + self._trace(value, (self.h + int(end)) * nc + int(comp), layers, add)
        return value + (self.spread0 if add else 0), cut

    def _windows(self, slowest_us: int, cap_mb: int
                 ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], np.ndarray] | None:
        """_placed for these bounds, with which kind counts each rank can hold within them (ranks × codes), the
        latest few kept (a least and its evenest cut ask for the same); None when _placed is."""
        key = (slowest_us, cap_mb)
        if key not in self.windows_of:
            if len(self.windows_of) >= WINDOWS_KEPT:
                self.windows_of.pop(next(iter(self.windows_of)))
            fits = (self.priced[0] <= slowest_us) & (self.priced[1] <= cap_mb)
            placed = self._placed(fits)
            self.windows_of[key] = None if placed is None else (*placed, fits)
        return self.windows_of[key]

    def _placed(self, fits: np.ndarray) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
        """For each rank, the blocks the ranks up to it can have placed, and the fewest and most blocks it holds:
        those of any kind counts it can hold within the bounds (`fits`; its least … its longest), the ranks after
        it able to take the rest; None when some rank can hold nothing."""
        n = self.n
        fewest, most = self._holdable_blocks
        least = np.minimum.reduce(fewest, axis=1, where=fits, initial=n + 1).tolist()
        if n + 1 in least:
            return None
        held = list(zip(least, np.maximum.reduce(most, axis=1, where=fits, initial=-1).tolist(), strict=True))
        done_least = list(itertools.accumulate(low for low, _ in held))
        done_most = list(itertools.accumulate(high for _, high in held))
        return [(max(low, n - (done_most[-1] - high)), min(high, n - (done_least[-1] - low)))
                for low, high in zip(done_least, done_most, strict=True)], held

    def _step(self, values: np.ndarray, start: np.ndarray, dst: np.ndarray, cost: np.ndarray, lo: int, hi: int,
              add: bool) -> tuple[np.ndarray, np.ndarray]:
        """One rank: for every state and blocks placed lo … hi, the least over edges into it (sorted by `dst`)
        of the larger of the value it came from and the edge's cost (with `add`, of their sum), and the states
        with a finite one (live, ascending). Sources' values are read from `values` flat, at `start` + blocks
        placed (_Joined.read). Only the rows of states some edge reaches are set (one state, as most often where
        the classes are few, as one row)."""
        placed = np.arange(lo, hi + 1)
        step = max(1, CHUNK // len(placed))
        if len(start) <= step:
            out = np.empty_like(values)
            keys, best = self._reach(values.ravel(), start, dst, cost, placed, add)
            if len(keys) == 1:
                row = out[keys[0]]
                row.fill(INF)
                row[self.n + 1 + lo:self.n + 2 + hi] = best[0]
                return out, keys if (best < INF).any() else keys[:0]
            out[keys] = INF
            out[keys, self.n + 1 + lo:self.n + 2 + hi] = best
            return out, keys[(best < INF).any(axis=1)]
        out = np.full_like(values, INF)
        columns = slice(self.n + 1 + lo, self.n + 2 + hi)
        for i in range(0, len(start), step):
            keys, best = self._reach(values.ravel(), start[i:i + step], dst[i:i + step], cost[i:i + step], placed, add)
            out[keys, columns] = np.minimum(out[keys, columns], best)
        return out, np.flatnonzero((out[:, columns] < INF).any(axis=1))

    @staticmethod
    def _reach(flat: np.ndarray, start: np.ndarray, dst: np.ndarray, cost: np.ndarray, placed: np.ndarray,
               add: bool) -> tuple[np.ndarray, np.ndarray]:
        """_step over some of its edges (sorted by `dst`): the states they reach and their least values by
        blocks placed (edges into one state: one least, no segments)."""
        came = flat.take(start[:, None] + placed[None, :])
        reached = np.where(came < INF, came + cost[:, None], INF) if add else np.maximum(came, cost[:, None])
        if dst[0] == dst[-1]:
            return dst[:1], np.minimum.reduce(reached, axis=0, keepdims=True)
        starts = np.flatnonzero(np.concatenate(([True], dst[1:] != dst[:-1])))
        return dst.take(starts), np.minimum.reduceat(reached, starts, axis=0)

    def _trace(self, value: int, state: int, layers: list[_Layer], add: bool) -> tuple[int, ...]:
        """A cut of `value` ending in `state`: each rank, last first, takes an edge into the state from a
        value within `value` (with `add`, from the value less the edge's score, which is then owed); the
        moves are then replayed on named rounds and the rounds put in trail order."""
        placed, picks = self.n, []
        for r in range(len(layers) - 1, -1, -1):
            layer = layers[r]
            which, src, shift, cost = self._into(layer, state, placed, value, add)
            if add:
                value -= cost
            rows = layer.joined.rows
            picks.append((src, self.ranks[r].detail(src, int(rows[3, which])), int(rows[4, which])))
            placed -= shift
            state = src
        picks.reverse()
        return self._layout(state, picks)

    def _into(self, layer: _Layer, state: int, placed: int, value: int, add: bool) -> tuple[int, int, int, int]:
        """_trace's edge of one layer: the first into `state` with `placed` blocks placed whose cost is within
        `value` and whose source's value is too (with `add`, is `value` less the cost): (its index among the
        expanded moves, source, blocks, cost). Edges are read one by one: the first mostly serves."""
        first, last = np.searchsorted(layer.dst, [state, state + 1]).tolist()
        for i in range(first, last):
            which, cost = int(layer.pick[i]), int(layer.cost[i])
            src, shift = int(layer.joined.src[which]), int(layer.joined.rows[1, which])
            if placed < shift or cost > value:
                continue
            came = int(layer.values[src, self.n + 1 + placed - shift])
            if (came < INF and came + cost == value) if add else came <= value:
                return which, src, shift, cost
        raise AssertionError("no edge of the traced value")

    def _layout(self, start: int, picks: list[tuple[int, tuple[int, int], int]]) -> tuple[int, ...]:
        """The cut of the traced moves: later rounds named from the first state's counts, each rank's residues
        given to rounds of the matching (start, front) pair, each piece at its shortest and the rank's pooled
        periods past those spread over its pieces shortest first, then the rounds ordered along an Euler trail
        from round 0's end class."""
        q, h, nc = self.q, self.h, len(self.comps)
        counts = self.comps[start % nc]
        rounds = [[s, s] for s in range(q) for _ in range(counts[s * q + s])]
        pieces = [[0] * self.vpp for _ in range(self.pp)]
        c0 = self.cl.of(0)
        for r, (state, (i, j), periods) in enumerate(picks):
            g = self.ranks[r]
            kind, amount = g.first(state // nc)[7][i]
            picked = g.rounds.picked(state % nc, j)
            choice = [_compositions(m, q)[int(x)] for m, x in zip(self.comps[state % nc], picked, strict=True)]
            residues: list[tuple[int, int]] = []
            size: dict[int, int] = {}
            if kind == "residue":
                residues.append((0, amount))
                c0 = h + (c0 - h + amount) % q
            else:
                if kind == "length":
                    pieces[r][0] = amount
                else:
                    size[0] = amount
                c0 = int(self.cl.exit[c0, amount])
            free: dict[int, list[int]] = {}
            for t, (s, f) in enumerate(rounds):
                free.setdefault(s * q + f, []).append(t)
            for pair, split in enumerate(choice):
                given = [rho for rho, m in enumerate(split) for _ in range(m)]
                residues.extend((t + 1, rho) for t, rho in zip(free.get(pair, ()), given, strict=False))
            size.update({slot: g.shortest(rho) for slot, rho in residues})
            shortest = [(length, slot) for slot, length in size.items()]
            heapq.heapify(shortest)
            for _ in range(periods - g.least * sum(rho == 0 for _, rho in residues)):
                length, slot = heapq.heappop(shortest)
                heapq.heappush(shortest, (length + q, slot))
            for length, slot in shortest:
                pieces[r][slot] = length
            for t, rho in residues:
                if t:
                    rounds[t - 1][1] = (rounds[t - 1][1] + rho) % q
        order = self._trail(rounds, c0 - h)
        return tuple(pieces[k % self.pp][0 if k < self.pp else 1 + order[k // self.pp - 1]]
                     for k in range(self.pp * self.vpp))

    @staticmethod
    def _trail(rounds: list[list[int]], start: int) -> list[int]:
        """The rounds (start class, end class) in an order where each starts where the one before ends, the
        first at `start` (Hierholzer's walk)."""
        out: dict[int, list[int]] = {}
        for t, (s, _) in enumerate(rounds):
            out.setdefault(s, []).append(t)
        for edges in out.values():
            edges.reverse()
        stack: list[tuple[int, int | None]] = [(start, None)]
        path: list[int] = []
        while stack:
            node, edge = stack[-1]
            if out.get(node):
                t = out[node].pop()
                stack.append((rounds[t][1], t))
            else:
                stack.pop()
                if edge is not None:
                    path.append(edge)
        path.reverse()
        assert len(path) == len(rounds)
        return path


class RoundProgram:
    """The exact interleaved cut program of one row: the cuts whose round 1 starts past the lead-in (one
    case), and where round 0 can end inside the lead-in, those whose first rounds do (one case per such run
    of rounds and the ranks' kind counts in it, few: a V4 row at PP 4 has one, round 0 a block on each middle
    rank; at PP 2, eight); the least over the cases."""

    def __init__(self, cuts, groups: np.ndarray) -> None:  # noqa: ANN001 - InterleavedCuts (no cycle)
        self.cuts = cuts
        self.pp, self.vpp, self.n = cuts.pp, cuts.vpp, cuts.n
        seq = tuple(int(g) for g in groups)
        self.usable = False
        """Whether this program runs on the row (a short enough period and lead-in, few enough round counts)."""
        self.cases: list[_Case] = []
        self.floors: list[tuple[int, int]] = []
        """(cap MB, a slowest-rank time µs no cut within that cap beats) from the time questions answered."""
        shape = _shape(seq, self.vpp)
        if shape is None or self.vpp < 2:
            return
        prefixes = _prefixes(cuts.least[:self.pp], shape[0], self.vpp - 1, CASE_LIMIT)
        if prefixes is None:
            return
        groups_n = len(cuts.relaxed.groups)
        stages = self.pp * self.vpp
        evenest: dict[tuple[int, int, bytes], tuple[int, tuple[int, ...], np.ndarray]] = {}
        for prefix in prefixes:
            offsets = np.zeros((self.pp, groups_n), dtype=np.int64)
            start = 0
            for k, length in enumerate(prefix):
                np.add.at(offsets[k % self.pp], np.array(seq[start:start + length], dtype=np.int64), 1)
                start += length
            key = (len(prefix), start, offsets.tobytes())
            spread = sum(abs(x * stages - self.n) for x in prefix)
            if key not in evenest or spread < evenest[key][0]:
                evenest[key] = (spread, prefix, offsets)
        cases = [_Case(cuts, seq, shape, (), np.zeros((self.pp, groups_n), dtype=np.int64))]
        for (_, start, _), (_, prefix, offsets) in evenest.items():
            tail = seq[start:]
            inner = _shape(tail, self.vpp - len(prefix) // self.pp)
            if inner is None:
                return
            cases.append(_Case(cuts, tail, inner, prefix, offsets))
        self.cases, self.usable = cases, True

    @property
    def states(self) -> int:
        """The program's states over its cases (front classes × round counts × blocks placed a rank can
        leave), a measure of its cost."""
        return sum(case.g.classes * len(case.comps) * (case.n - sum(case.least) + 1) for case in self.cases)

    def least(self, slowest_us: int, cap_mb: int, minimise_time: bool,
              alike: Callable[[int], int] | None = None) -> tuple[int, tuple[int, ...]] | None:
        """The least slowest-rank time (µs; or with `minimise_time` False the least peak rank memory, MB) over
        every cut with each rank within `slowest_us` and `cap_mb`, and a cut that has it; with `alike`, the
        evenest cut (least Σ |stage length · stages − n|) whose objective is at most `alike(least)` instead
        (FrontProgram.least's contract). None when no cut is within both. Raises Declined past the deadline
        or CELL_LIMIT."""
        slowest_us, cap_mb = self._tightened(slowest_us, cap_mb, minimise_time)
        if minimise_time and alike is None:
            return self._fastest(slowest_us, cap_mb)
        return least_then_evenest(self._best, slowest_us, cap_mb, minimise_time, alike, self._least)

    def fastest_us(self, slowest_us: int, cap_mb: int) -> int | None:
        """least's least slowest-rank time alone, no cut built (None when no cut is within both bounds): what a
        staircase step needs of its fastest cut before the leanest at its step time."""
        found = self._fastest(*self._tightened(slowest_us, cap_mb, True), trace=False)
        return None if found is None else found[0]

    def _fastest(self, slowest_us: int, cap_mb: int, trace: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """least's least slowest-rank time: first within guesses a little, then more, above the most any looser
        cap's answer proves it is at least (GUESS_SHARES; a staircase asks for ever tighter caps, and its times
        climb slowly), each miss raising that floor, then, when no cut is within the guesses, within
        `slowest_us`. A bound at or above the least leaves the least and its traced cut as they are (every cut
        of the least, and every partial cut on one, is within it), so the answer is the same, from far fewer
        moves."""
        floor = max((us for cap, us in self.floors if cap >= cap_mb), default=None)
        for share in GUESS_SHARES if floor is not None else ():
            guess = floor + floor // share
            if guess >= slowest_us:
                break
            found = self._best(Question(guess, cap_mb, True, None), trace)
            if found is not None:
                self.floors.append((cap_mb, found[0]))
                return found
            floor = guess + 1
            self.floors.append((cap_mb, floor))
        found = self._best(Question(slowest_us, cap_mb, True, None), trace)
        self.floors.append((cap_mb, slowest_us + 1 if found is None else found[0]))
        return found

    def _best(self, question: Question, trace: bool = True) -> tuple[int, tuple[int, ...]] | None:
        """The least value over the cases (the first case's cut on a tie). A case after one that answered is
        asked only for an objective below that answer (_below), which it must beat to count."""
        best: tuple[int, tuple[int, ...]] | None = None
        for case in self.cases:
            found = case.program(question if best is None else _below(question, best[0]), trace)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        return best

    def _least(self, question: Question) -> int | None:
        """The least value over the cases, no cut built."""
        found = self._best(question, trace=False)
        return None if found is None else found[0]

    @functools.cached_property
    def _even(self) -> tuple[int, int]:
        """(slowest-rank time µs, peak MB) of the evenest cut: stage sizes differing by at most one, or with
        fewer blocks than stages, empty_stages.evenest_cut's."""
        stages = self.pp * self.vpp
        if stages > self.n:
            return self.cuts.measure(evenest_cut(self.n, self.pp, self.vpp))
        edges = [k * self.n // stages for k in range(stages + 1)]
        return self.cuts.measure(tuple(edges[k + 1] - edges[k] for k in range(stages)))

    def _tightened(self, slowest_us: int, cap_mb: int, minimise_time: bool) -> tuple[int, int]:
        """The bounds with the objective's lowered to the evenest cut's value when that cut is within both
        (the least is at most it, so no cut of the least is lost and far fewer moves are priced)."""
        time, memory = self._even
        if time > slowest_us or memory > cap_mb:
            return slowest_us, cap_mb
        return (time, cap_mb) if minimise_time else (slowest_us, memory)

