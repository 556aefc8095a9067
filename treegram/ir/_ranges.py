"""Sets of code points as sorted, disjoint, non-adjacent inclusive ranges.

Shared by the regex parser, the JSON Schema lexemes, the code point automata and the
automaton builder (which turns them into UTF-8 byte ranges). Empty ranges (``lo > hi``)
are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

from treegram.ir._nodes import MAX_CODEPOINT

__all__ = ["Ranges", "complement_ranges", "intersect_ranges", "normalize_ranges"]

Ranges = tuple[tuple[int, int], ...]


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sort inclusive ranges, drop empty ones and merge overlapping or adjacent ones."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def complement_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in ``[0, MAX_CODEPOINT]`` that ``ranges`` do not cover."""
    out, nxt = [], 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


def intersect_ranges(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in both ``a`` and ``b``."""
    b = list(b)
    out = [(max(lo1, lo2), min(hi1, hi2)) for lo1, hi1 in a for lo2, hi2 in b]
    return normalize_ranges(out)
