"""max_recursion_depth (xgrammar's process-wide setting): get/set/context manager, and the
JSON documents it bounds (schemas, Lark %json values, deserialize_json input)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import treegram as tg
from treegram._json import json_text_depth


def _nested(depth: int) -> str:
    return '{"unused": ' + "[" * depth + "0" + "]" * depth + "}"


def test_default_get_set_and_context():
    assert tg.get_max_recursion_depth() == 10_000
    with tg.max_recursion_depth(1000):
        assert tg.get_max_recursion_depth() == 1000
    assert tg.get_max_recursion_depth() == 10_000
    tg.set_max_recursion_depth(77)
    try:
        assert tg.get_max_recursion_depth() == 77
    finally:
        tg.set_max_recursion_depth(10_000)


@pytest.mark.parametrize("bad", [0, -1, 1_000_001, 2.5, True, "10"])
def test_invalid_depth_is_refused_and_nothing_changes(bad):
    with pytest.raises(tg.ConfigError, match="max_recursion_depth") as info:
        tg.set_max_recursion_depth(bad)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)
    with pytest.raises(tg.ConfigError), tg.max_recursion_depth(bad):
        pass
    assert tg.get_max_recursion_depth() == 10_000


def test_environment_variable_sets_the_default():
    code = "import treegram; print(treegram.get_max_recursion_depth())"
    for value, expected in (("123", "123"), ("bogus", "10000"), ("0", "10000")):
        env = dict(os.environ, TREEGRAM_MAX_RECURSION_DEPTH=value)
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.stdout.strip() == expected, out.stderr


def test_schema_depth_is_bounded():
    with tg.max_recursion_depth(50):
        tg.Grammar.from_json_schema(_nested(40))
        with pytest.raises(RuntimeError, match="Maximum recursion depth exceeded"):
            tg.Grammar.from_json_schema(_nested(60))


def test_lark_json_value_depth_is_bounded_per_value():
    with tg.max_recursion_depth(50):
        assert tg.Grammar.from_lark("start: %json true\n# " + "[" * 100) is not None
        with pytest.raises(tg.LarkSyntaxError, match="Maximum recursion depth exceeded"):
            tg.Grammar.from_lark("start: %json " + "[" * 60 + "]" * 60)


def test_deserialize_depth_is_bounded():
    with tg.max_recursion_depth(50), pytest.raises(tg.InvalidJSONError, match="Maximum recursion"):
        tg.Grammar.deserialize_json("[" * 60 + "]" * 60)
    with pytest.raises(tg.InvalidJSONError, match="invalid JSON"):
        tg.Grammar.deserialize_json("{")
    assert issubclass(tg.InvalidJSONError, tg.DeserializeFormatError)


@pytest.mark.parametrize(
    "text,depth",
    [("0", 0), ("[]", 1), ('{"a": [[1], {"b": 2}]}', 3), ('["[[[[", "]"]', 1), (r'["\"[["]', 1)],
)
def test_json_text_depth(text, depth):
    assert json_text_depth(text) == depth
    assert json_text_depth(text.encode()) == depth
