"""``Dfa.minimize`` (the numba partition kernel) against a textbook reference: Moore's
refinement over explicit symbols, then the same canonical breadth-first numbering."""

from __future__ import annotations

import random

import pytest

from treegram.ir import Dfa


def _reference_minimize(d: Dfa) -> Dfa:
    d = d.trim()
    n = len(d)
    points = sorted({p for row in d.trans for lo, hi, _ in row for p in (lo, hi + 1)})
    block = [int(a) for a in d.accept]
    while True:
        sigs = {}
        new_block = []
        for s in range(n):
            row = tuple(
                (p, block[t] if t is not None else -1) for p in points for t in [d.step(s, p)]
            )
            new_block.append(sigs.setdefault((block[s], row), len(sigs)))
        if len(sigs) == len(set(block)):
            break
        block = new_block
    # the canonical numbering Dfa.minimize uses
    new, reps, trans = {block[0]: 0}, [0], []
    i = 0
    while i < len(reps):
        row = []
        for lo, hi, t in d.trans[reps[i]]:
            if block[t] not in new:
                new[block[t]] = len(reps)
                reps.append(t)
            row.append((lo, hi, new[block[t]]))
        merged: list[list[int]] = []
        for lo, hi, t in sorted(row):
            if merged and merged[-1][2] == t and merged[-1][1] + 1 == lo:
                merged[-1][1] = hi
            else:
                merged.append([lo, hi, t])
        trans.append(tuple(tuple(x) for x in merged))
        i += 1
    return Dfa(trans, [d.accept[s] for s in reps])


def _random_dfa(rng: random.Random) -> Dfa:
    n = rng.randrange(1, 12)
    trans = []
    for _ in range(n):
        cuts = sorted(rng.sample(range(0, 40), rng.randrange(0, 6)))
        row = []
        for lo, hi in zip(cuts[::2], cuts[1::2], strict=False):
            row.append((lo, hi, rng.randrange(n)))
        if rng.random() < 0.2:
            row.append((100, 0x10FFFF, rng.randrange(n)))
        trans.append(tuple(row))
    return Dfa(trans, [rng.random() < 0.4 for _ in range(n)])


def test_minimize_matches_moore_on_random_automata():
    rng = random.Random(11)
    for _ in range(400):
        d = _random_dfa(rng)
        got, want = d.minimize(), _reference_minimize(d)
        assert (got.trans, got.accept) == (want.trans, want.accept), d.trans


@pytest.mark.parametrize(
    "build",
    [
        lambda: Dfa.literals(["alpha", "alps", "beta", "bet", ""]),
        lambda: Dfa.any().difference(Dfa.literals([f"key{i}" for i in range(40)])),
        lambda: Dfa.length(3, 9).complement(),
        lambda: Dfa.multiples(7),
    ],
)
def test_minimize_matches_moore_on_frontend_shapes(build):
    d = build()
    got, want = d.minimize(), _reference_minimize(d)
    assert (got.trans, got.accept) == (want.trans, want.accept)
    assert len(got.minimize()) == len(got)


def test_products_accept_what_their_operands_say():
    rng = random.Random(5)
    words = [
        "".join(chr(rng.choice([1, 5, 12, 20, 33, 39, 150])) for _ in range(rng.randrange(0, 6)))
        for _ in range(300)
    ]
    for _ in range(150):
        a, b = _random_dfa(rng), _random_dfa(rng)
        ops = {
            "intersect": (a.intersect(b), lambda x, y: x and y),
            "union": (a.union(b), lambda x, y: x or y),
            "difference": (a.difference(b), lambda x, y: x and not y),
        }
        for name, (dfa, op) in ops.items():
            assert dfa.minimize().trans == dfa.trans, name  # already minimal and canonical
            for w in words:
                assert dfa.accepts(w) == op(a.accepts(w), b.accepts(w)), (name, w)


def test_all_but_is_the_minimal_complement_of_the_literals():
    # oracle: the difference product from every string, minimized; and membership itself
    rng = random.Random(23)
    alphabet = ["a", "b", "\u00e9", "\U0001f600", '"', "\\", "\x00", "\U0010ffff"]
    for _ in range(300):
        texts = {
            "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 5)))
            for _ in range(rng.randrange(1, 8))
        }
        got = Dfa.all_but(sorted(texts))
        want = Dfa.any().difference(Dfa.literals(sorted(texts)))
        assert (got.trans, got.accept) == (want.trans, want.accept), texts
        for w in [*texts, "", "a", "ab", "\u00e9a", "zz", "a" * 6]:
            assert got.accepts(w) == (w not in texts), (texts, w)


def test_all_but_within_is_the_product_taken_twice():
    # the undeclared keys of an object as key literals take them: every string without a
    # lone surrogate but the names, in one product; the automaton (states, numbering) is
    # the one of the two products it replaces
    rng = random.Random(29)
    alphabet = ["a", "b", "\u00e9", "\ud800", "\U0001f600", '"', "\x00", "\U0010ffff"]
    writable = Dfa([((0, 0xD7FF, 0), (0xE000, 0x10FFFF, 0))], [True])
    for _ in range(300):
        texts = sorted(
            {
                "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 5)))
                for _ in range(rng.randrange(1, 8))
            }
        )
        got = Dfa.all_but(texts, within=writable)
        want = Dfa.all_but(texts).intersect(writable)
        assert (got.trans, got.accept) == (want.trans, want.accept), texts


def test_product_past_the_state_limit_raises(monkeypatch):
    from treegram.ir import _charset

    monkeypatch.setattr(_charset, "MAX_STATES", 20)
    a = Dfa.length(0, 15)
    b = Dfa.literal("abcdefghijklmnop").complement()
    with pytest.raises(_charset.DfaLimitError, match="more than 20"):
        a.intersect(b)
