"""The key languages of objects without patterns (every writable string but the declared
names) are kept per name list, and the shape ``dfa_expr`` reads from an automaton (its
transitions by target, in-degrees, cycles) per automaton: both must be what the plain
computation gives, and the grammars the same as without them."""

from __future__ import annotations

import json

import pytest

import treegram as tg
from treegram.frontends.json_schema import _dfa_expr, _keys
from treegram.frontends.json_schema._dfa_expr import WRITABLE
from treegram.ir import Dfa

_NAMES = [
    (),
    ("a",),
    ("a", "ab", "abc"),
    ("apiVersion", "kind", "metadata", "spec", "status"),
    ("", "x"),
    ("é", "日本", "\U0001f600", "a\u0000b"),
]


@pytest.mark.parametrize("names", _NAMES)
def test_undeclared_keys_is_the_plain_product(names):
    _keys.undeclared_keys.cache_clear()
    plain = Dfa.all_but(list(names), within=WRITABLE)
    got = _keys.undeclared_keys(names)
    assert got.trans == plain.trans and got.accept == plain.accept
    assert _keys.undeclared_keys(tuple(names)) is got  # kept
    for name in names:
        assert not got.accepts(name)
    assert got.accepts("undeclared") == ("undeclared" not in names)


def _plain_shape(d: Dfa):
    groups = []
    for row in d.trans:
        g: dict = {}
        for lo, hi, t in row:
            g.setdefault(t, []).append((lo, hi))
        groups.append({t: tuple(ranges) for t, ranges in g.items()})
    indeg = [0] * len(groups)
    for s, g in enumerate(groups):
        for t in g:
            if t != s:
                indeg[t] += 1
    return groups, indeg, _dfa_expr._on_cycles(groups)


@pytest.mark.parametrize("names", _NAMES)
def test_shape_is_the_plain_one_and_kept_per_automaton(names):
    d = Dfa.all_but(list(names), within=WRITABLE)
    first = _dfa_expr._shape(d)
    assert first == _plain_shape(d)
    assert _dfa_expr._shape(d) is first
    # an equal automaton that is another object is read again, not taken by equality
    other = Dfa(list(d.trans), list(d.accept))
    assert _dfa_expr._shape(other) is not first and _dfa_expr._shape(other) == first


def test_a_stale_entry_is_not_taken_for_another_automaton():
    d = Dfa.all_but(["a"], within=WRITABLE)
    e = Dfa.all_but(["b", "bc"], within=WRITABLE)
    _dfa_expr._SHAPES[id(e)] = (d, _dfa_expr._shape(d))  # as if e had d's reused id
    try:
        assert _dfa_expr._shape(e) == _plain_shape(e)
    finally:
        _dfa_expr._SHAPES.clear()


def _schema(n: int) -> str:
    # the same property list under many parents, and a few of their own
    item = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "value": {"type": "integer"}},
    }
    props = {f"p{i}": item if i % 2 else {**item, "title": f"t{i}"} for i in range(n)}
    props["own"] = {"type": "object", "properties": {"nam": {"type": "boolean"}}}
    return json.dumps({"type": "object", "properties": props})


def _grammar(schema: str) -> str:
    return tg.Grammar.from_json_schema(
        schema, any_whitespace=True, strict_mode=False
    ).serialize_json()


def test_grammars_equal_those_of_the_plain_path(monkeypatch):
    schema = _schema(6)
    _keys.undeclared_keys.cache_clear()
    warm = _grammar(schema)  # the caches filled by the first half of the conversion
    assert _keys.undeclared_keys.cache_info().hits > 0
    again = _grammar(schema)  # and all of it
    _keys.undeclared_keys.cache_clear()
    _dfa_expr._SHAPES.clear()
    monkeypatch.setattr(
        _keys, "undeclared_keys", lambda names: Dfa.all_but(list(names), within=WRITABLE)
    )
    monkeypatch.setattr(_dfa_expr, "_shape", _plain_shape)
    plain = _grammar(schema)
    assert warm == plain and again == plain


def test_kept_shapes_are_bounded_by_their_states(monkeypatch):
    monkeypatch.setattr(_dfa_expr, "_SHAPES_STATES", 40)
    _dfa_expr._SHAPES.clear()
    _dfa_expr._kept_states[0] = 0
    kept = []
    for i in range(20):
        d = Dfa.all_but([f"name{i}", f"other{i}"], within=WRITABLE)
        kept.append(d)  # alive: ids not reused
        assert _dfa_expr._shape(d) == _plain_shape(d)
        assert sum(len(e.trans) for e, _ in _dfa_expr._SHAPES.values()) <= 40
        assert _dfa_expr._kept_states[0] == sum(len(e.trans) for e, _ in _dfa_expr._SHAPES.values())
    _dfa_expr._SHAPES.clear()
    _dfa_expr._kept_states[0] = 0
