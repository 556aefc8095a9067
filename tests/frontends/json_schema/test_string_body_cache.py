"""Format and pattern bodies are built once and handed out as copies
(``_lex.build_template`` / ``copy_build``): each copy must be what a new build is, the
same structure, new objects but for those every build shares, and the same sharing
between its nodes; the grammars must be the same as with a build per use."""

from __future__ import annotations

import json

import pytest

import treegram as tg
from treegram.frontends.json_schema import _convert, _strings
from treegram.frontends.json_schema._formats import FORMATS
from treegram.ir import Choice, Repeat, Seq


def _walk(expr) -> list:
    """Every node reached, once per path, in a fixed order."""
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (Seq, Choice)):
            stack.extend(reversed(node.items))
        elif isinstance(node, Repeat):
            stack.append(node.item)
    return out


def _sharing(expr) -> list[int]:
    """The identity pattern of ``expr``: per node reached, the index of the first node
    reached that is the same object."""
    first: dict[int, int] = {}
    return [first.setdefault(id(n), k) for k, n in enumerate(_walk(expr))]


def _assert_like_a_build(copy, build, constants) -> None:
    assert copy == build
    assert _sharing(copy) == _sharing(build)
    # the copy and a new build share exactly the nodes every build shares
    ids_copy = {id(n) for n in _walk(copy)}
    ids_build = {id(n) for n in _walk(build)}
    assert ids_copy & ids_build == constants & ids_build


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_copies_are_builds(name):
    template = _strings._format_template(name)
    build = _strings._format_build(name)
    copy = _strings.format_body(name)
    if build is None:
        assert copy is None
        return
    _assert_like_a_build(copy, build, template[1])
    again = _strings.format_body(name)
    # two copies share the shared nodes only
    assert not ({id(n) for n in _walk(again)} - template[1]) & {id(n) for n in _walk(copy)}


@pytest.mark.parametrize(
    "pattern",
    ["^[a-z]+$", "abc", "^(foo|bar)-[0-9]{2,4}", "x|^y$|z", "^\\d{4}-\\d{2}-\\d{2}$", "é+"],
)
def test_pattern_copies_are_builds(pattern):
    template = _strings._pattern_template(pattern)
    _assert_like_a_build(
        _strings.pattern_body(pattern), _strings._pattern_build(pattern), template[1]
    )


def test_pattern_errors_are_raised_each_time():
    for _ in range(2):
        with pytest.raises(ValueError):
            _strings.pattern_body("a(^b)")


def _schema() -> str:
    props = {}
    for i in range(4):
        props[f"d{i}"] = {"type": "string", "format": "date-time"}
        props[f"u{i}"] = {"type": "string", "format": "uuid"}
        props[f"p{i}"] = {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}
    props["list"] = {"type": "array", "items": {"type": "string", "format": "date-time"}}
    return json.dumps({"type": "object", "properties": props})


def _grammar(schema: str) -> str:
    return tg.Grammar.from_json_schema(
        schema, any_whitespace=True, strict_mode=False
    ).serialize_json()


def test_grammars_equal_those_of_a_build_per_use(monkeypatch):
    schema = _schema()
    cached = _grammar(schema)
    monkeypatch.setattr(_strings, "format_body", _strings._format_build)
    monkeypatch.setattr(_strings, "pattern_body", _strings._pattern_build)
    monkeypatch.setattr(_convert, "format_body", _strings._format_build)
    monkeypatch.setattr(_convert, "pattern_body", _strings._pattern_build)
    assert _grammar(schema) == cached
