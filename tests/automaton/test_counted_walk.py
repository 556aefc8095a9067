"""``_counted.state_chars`` (a numba walk of a counted rule's DFA) against a plain walk
that steps the counting machine (``kernels.char_step``) on every byte of every edge, not
one byte per piece: on the DFAs of counted rules from JSON Schemas and on random DFAs
(most of them no string content: the errors must match too)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import treegram
from treegram.automaton import _build, build_automaton
from treegram.automaton._counted import state_chars
from treegram.errors import GrammarError
from treegram.kernels import CHAR_BOUNDARY, char_step, layout

_STEP = char_step.py_func


def _plain_state_chars(part: tuple, bound: int, name: str) -> np.ndarray:
    final, byte_ptr, lo, hi, to, ref_ptr, _, ref_to = (x.tolist() for x in part[:8])
    n = len(final)
    pending = [-1] * n
    pending[0] = CHAR_BOUNDARY
    steps = []  # (source, target, counted)
    order = [0]
    not_content = GrammarError(
        f"rule {name!r} has max_string_chars but its text is not the content of a JSON string"
    )

    def reach(s, t, x):
        if x < 0 or pending[t] not in (-1, x >> 1):
            raise not_content
        if pending[t] == -1:
            pending[t] = x >> 1
            order.append(t)
        steps.append((s, t, x & 1))

    for s in order:  # grows while read: breadth first
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for b in range(lo[e], hi[e] + 1):
                reach(s, to[e], _STEP(pending[s], b))
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            reach(s, ref_to[e], 2 * CHAR_BOUNDARY + 1 if pending[s] == CHAR_BOUNDARY else -1)
    if any(final[s] and pending[s] != CHAR_BOUNDARY for s in range(n)):
        raise GrammarError(f"rule {name!r} has max_string_chars but may end inside a character")
    # fixed points, sweeping the steps from the deepest source first (few sweeps)
    depth = {s: i for i, s in enumerate(order)}
    steps.sort(key=lambda st: -depth[st[0]])
    need = [0 if final[s] else None for s in range(n)]
    changed = True
    while changed:  # fewest counted steps to an end
        changed = False
        for s, t, w in steps:
            if need[t] is not None and (need[s] is None or need[t] + w < need[s]):
                need[s] = need[t] + w
                changed = True
    limits = [
        -1 if d is None or d > bound else min(bound - d, layout.NOT_COUNTED - 1) for d in need
    ]
    ahead = [x if x >= 0 else None for x in limits]
    changed = True
    while changed:  # the least live limit reachable, the state itself included
        changed = False
        for s, t, _ in steps:
            if ahead[t] is not None and (ahead[s] is None or ahead[t] < ahead[s]):
                ahead[s] = ahead[t]
                changed = True
    ahead = [-1 if x is None else x for x in ahead]
    return np.array(limits + ahead, dtype=np.int32)


def _outcome(f, part, bound):
    try:
        return f(part, bound, "r").tolist()
    except GrammarError as e:
        return str(e)


_SCHEMAS = [  # the string formats' automata are counted rules
    {"type": "string", "format": "email", "maxLength": 900},
    {"type": "string", "format": "uri-reference", "maxLength": 2000},
    {
        "type": "object",
        "properties": {"k": {"type": "string", "format": "email", "maxLength": 300}},
    },
]


@pytest.mark.parametrize("schema", _SCHEMAS, ids=range(len(_SCHEMAS)))
def test_counted_rules_of_schemas_match_the_plain_walk(schema, monkeypatch):
    seen = []

    def record(part, bound, name):
        seen.append((part, bound))
        return state_chars(part, bound, name)

    monkeypatch.setattr(_build, "state_chars", record)
    g = treegram.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True)
    build_automaton(g.ir)
    assert seen, "no counted rule built"
    for part, bound in seen:
        for b in (bound, 0, 1, 3):
            assert _outcome(state_chars, part, b) == _outcome(_plain_state_chars, part, b)


# bytes where the counting machine's step changes, and their neighbours
_BYTES = sorted(
    {0, 0x22, 0x30, 0x38, 0x39, 0x3A, 0x41, 0x42, 0x43, 0x44, 0x45, 0x5C, 0x5D, 0x61, 0x62}
    | {0x63, 0x64, 0x65, 0x66, 0x74, 0x75, 0x76, 0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0}
    | {0xEF, 0xF0, 0xF4, 0xF7, 0xF8, 0xFF}
)


def _random_part(rng: random.Random) -> tuple:
    n = rng.randint(1, 7)
    byte_ptr, lo, hi, to, ref_ptr, ref_to = [0], [], [], [], [0], []
    for _ in range(n):
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            a = rng.choice(_BYTES)
            b = a if rng.random() < 0.5 else rng.choice([x for x in _BYTES if x >= a])
            lo.append(a)
            hi.append(b)
            to.append(rng.randrange(n))
        byte_ptr.append(len(lo))
        for _ in range(rng.choice((0, 0, 0, 1))):
            ref_to.append(rng.randrange(n))
        ref_ptr.append(len(ref_to))
    final = [rng.random() < 0.4 for _ in range(n)]
    i32 = np.int32
    return (
        np.array(final, dtype=np.uint8),
        np.array(byte_ptr, dtype=i32),
        np.array(lo, dtype=i32),
        np.array(hi, dtype=i32),
        np.array(to, dtype=i32),
        np.array(ref_ptr, dtype=i32),
        np.zeros(len(ref_to), dtype=i32),
        np.array(ref_to, dtype=i32),
    )


def test_random_dfas_match_the_plain_walk():
    rng = random.Random(23)
    kinds = set()
    for _ in range(3000):
        part = _random_part(rng)
        bound = rng.choice((0, 1, 2, 5, 100))
        got = _outcome(state_chars, part, bound)
        assert got == _outcome(_plain_state_chars, part, bound), part
        kinds.add(got if isinstance(got, str) else "ok")
    assert len(kinds) == 3  # both errors and labelled automata were drawn
