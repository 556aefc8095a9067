"""The xgrammar import shim of benchmarks/xgrammar_suite: with it first on the path,
``import xgrammar`` is treegram under xgrammar 0.2.8's names (checked in a subprocess, so
this process keeps the real xgrammar), and the runner's failure causes are sorted right.
The whole suite is not run here (see benchmarks/xgrammar_suite/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "benchmarks" / "xgrammar_suite"

_PROBE = r"""
import json, xgrammar, treegram
import xgrammar.testing, xgrammar.structural_tag, xgrammar.builtin_structural_tag
import xgrammar.exception, xgrammar.config, xgrammar.matcher, xgrammar.grammar
import xgrammar.compiler, xgrammar.tokenizer_info, xgrammar.kernels
import xgrammar.openai_tool_call_schema
from xgrammar.kernels.apply_token_bitmask_inplace_cpu import apply_token_bitmask_inplace_cpu
from xgrammar.testing import _is_grammar_accept_string, GrammarFunctor
from xgrammar.tokenizer_info import _BYTE_LEVEL_CHARSET
names = {n: getattr(xgrammar, n) is getattr(treegram, n) for n in xgrammar.__all__
         if hasattr(treegram, n)}
print(json.dumps({
    "file": xgrammar.__file__,
    "missing": [n for n in xgrammar.__all__ if not hasattr(xgrammar, n)],
    "same": names,
    "testing": xgrammar.testing is treegram.testing,
    "structural_tag": xgrammar.structural_tag is treegram.structural_tag,
    "builtin": xgrammar.builtin_structural_tag is treegram.structural_tag,
    "kernel": apply_token_bitmask_inplace_cpu.__module__,
    "accepts": _is_grammar_accept_string('root ::= "a"+', "aaa"),
    "charset": len(_BYTE_LEVEL_CHARSET),
}))
"""


def test_shim_shadows_xgrammar_and_maps_names():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SUITE / "shim"), str(REPO)])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(SUITE / "shim")
    assert info["missing"] == []
    assert info["same"] and all(info["same"].values()), info["same"]
    assert {"Grammar", "GrammarMatcher", "max_recursion_depth"} <= set(info["same"])
    assert info["testing"] and info["structural_tag"] and info["builtin"]
    assert info["kernel"].startswith("treegram.")
    assert info["accepts"] is True and info["charset"] == 256


def test_failure_causes():
    sys.path.insert(0, str(SUITE))
    try:
        from run_suite import cause
    finally:
        sys.path.remove(str(SUITE))
    assert cause("failed", "OSError: We couldn't connect to 'https://huggingface.co'") == (
        "network / hub download"
    )
    assert cause("failed", "AttributeError: module 'xgrammar' has no attribute 'X'").startswith(
        "missing API"
    )
    assert cause("collection error", "ImportError: cannot import name 'Y'").startswith(
        "missing API"
    )
    assert "EBNF text" in cause("failed", "assert 'root ::= \"a\"' == 'root ::= ((\"a\"))'")
    assert cause("failed", "AssertionError: 3 != 4") == "different behaviour (assertion)"
    assert cause("timeout", "") == "timeout"
    assert cause("failed", "treegram.errors.GrammarError: no") == "exception (GrammarError)"
    assert "XML argument style" in cause(
        "failed", "UnsupportedStructuralTagError: format.style 'cohere_xml' is not supported"
    )
    assert "excludes" in cause(
        "failed", "format.json_schema: excludes with a JSON value that may hold strings is not"
    )
