"""Issue 11 finding 10: compiled grammars do not depend on optional packages.

Every schema of the JSON Schema suite subset in ``tests/data`` (plus the two reported
cases) is compiled in two fresh interpreters, one with ``jsonschema`` and ``referencing``
made unimportable by a ``sys.meta_path`` blocker; the grammar texts must be identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from schema_matching import accepts, compile_schema

from treegram.errors import GrammarError

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("jsonschema", "referencing")
EXTRA = [
    {"enum": ["a", "bbbb"], "minLength": 3},
    {"type": "object", "properties": {"ab": {}, "abcdef": {}}, "propertyNames": {"maxLength": 3}},
    {
        "type": "object",
        "properties": {"x1": {"type": "integer"}, "yy": {"type": "string"}},
        "propertyNames": {"pattern": "^x"},
    },
    {"const": "abc", "pattern": "^b"},
    {"oneOf": [{"enum": [1, 2, "a"]}, {"type": "string", "maxLength": 0}]},
]

CHILD = textwrap.dedent("""
    import importlib.abc, json, sys, warnings
    blocked = set(sys.argv[2].split(",")) if sys.argv[2] else set()

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"{name} is blocked for this test")
            return None

    sys.meta_path.insert(0, Blocker())
    for name in blocked:
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} is still importable")
    warnings.simplefilter("ignore")
    import treegram

    out = {}
    for key, schema in json.load(open(sys.argv[1], encoding="utf-8")):
        for strict in (False, True):
            try:
                text = str(treegram.Grammar.from_json_schema(schema, strict_mode=strict))
            except treegram.errors.TreegramError as exc:
                text = f"{type(exc).__name__}: {exc}"
            out[f"{key} strict={strict}"] = text
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("jsonschema", "referencing"))
    print(json.dumps({"grammars": out, "loaded": loaded}))
""")


def _schemas() -> list:
    out = []
    for path in sorted((REPO / "tests" / "data" / "json_schema_test_suite").rglob("*.json")):
        for gi, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            out.append((f"{path.name}#{gi}", group["schema"]))
    out.extend((f"extra#{i}", s) for i, s in enumerate(EXTRA))
    return out


def _compile_all(schemas_file: Path, blocked: tuple[str, ...]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(schemas_file), ",".join(blocked)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_same_grammars_without_jsonschema(tmp_path):
    schemas = _schemas()
    assert len(schemas) > 250
    schemas_file = tmp_path / "schemas.json"
    schemas_file.write_text(json.dumps(schemas), encoding="utf-8")
    plain = _compile_all(schemas_file, ())
    without = _compile_all(schemas_file, BLOCKED)
    assert without["loaded"] == []
    assert plain["loaded"] == []  # compiling never imports them
    assert len(plain["grammars"]) == 2 * len(schemas)
    differ = [k for k in plain["grammars"] if plain["grammars"][k] != without["grammars"][k]]
    assert differ == []


def test_reported_cases_compile_exactly():
    enum = compile_schema(EXTRA[0])
    assert accepts(enum, '"bbbb"') and not accepts(enum, '"a"')
    names = compile_schema(EXTRA[1])
    assert accepts(names, '{"ab": 1}') and not accepts(names, '{"abcdef": 1}')
    pattern = compile_schema(EXTRA[2])
    assert accepts(pattern, '{"x1": 1}') and not accepts(pattern, '{"x1": 1, "yy": "s"}')
    assert not accepts(pattern, '{"yy": "s"}')
    # a const that fails its sibling pattern: no value at all
    with pytest.raises(GrammarError, match="admits no JSON value"):
        compile_schema(EXTRA[3])
    one_of = compile_schema(EXTRA[4])
    assert accepts(one_of, "1") and accepts(one_of, '""') and accepts(one_of, '"a"')
    assert not accepts(one_of, '"b"') and not accepts(one_of, "3")
