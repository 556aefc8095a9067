"""Issue 11 finding 17: no ``RecursionError`` (or stray stdlib error) from any grammar input.

Deep or huge inputs either compile (on the frontends' deep-stack thread) or raise a
``TreegramError`` subclass that names the limit or the argument. Each case runs in its
own interpreter, so a stack overflow fails the case instead of killing pytest, and its
stderr must stay clean (no "Exception ignored" tracebacks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Helpers defined in every child before its case runs.
PRELUDE = textwrap.dedent('''
    import json, sys
    import treegram
    from treegram.automaton import build_automaton
    from treegram.ir._deep import MAX_EXPR_DEPTH, MAX_NESTING_DEPTH
    from treegram.ir._nodes import Bytes, GrammarIR, Rule, Seq

    def nest_obj(d):
        s = {"type": "integer"}
        for _ in range(d):
            s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
        return s

    def nest_arr(d):
        s = {"type": "integer"}
        for _ in range(d):
            s = {"type": "array", "items": s}
        return s

    def ref_chain(n):
        defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
        defs[f"d{n}"] = {"type": "integer"}
        return {"$ref": "#/$defs/d0", "$defs": defs}

    def props(n, required):
        out = {"type": "object", "properties": {f"p{i}": {"type": "integer"}
                                                for i in range(n)}}
        if required:
            out["required"] = list(out["properties"])
        return out

    def deep_ir(d):
        e = Bytes(b"a")
        for _ in range(d):
            e = Seq((e, Bytes(b"b")))
        return GrammarIR((Rule("root", e),), "root")

    def compile_all(grammar):
        """Everything a compile touches: automaton, printer, reparse, hash and ==."""
        a = build_automaton(grammar.ir)
        text = str(grammar)
        again = treegram.Grammar.from_ebnf(text)
        assert hash(grammar) == hash(grammar)
        assert build_automaton(again.ir).n_states == a.n_states
        return a

    limit_before = sys.getrecursionlimit()
''')

EPILOGUE = textwrap.dedent("""
    assert sys.getrecursionlimit() == limit_before, sys.getrecursionlimit()
    print("CASE-OK")
""")

COMPILES = {
    "object nesting 400": "compile_all(treegram.Grammar.from_json_schema(nest_obj(400)))",
    "array nesting 500": "compile_all(treegram.Grammar.from_json_schema(nest_arr(500)))",
    "object nesting up to MAX_NESTING_DEPTH": (
        "compile_all(treegram.Grammar.from_json_schema(nest_obj(MAX_NESTING_DEPTH - 2)))"
    ),
    "500 chained $refs": "compile_all(treegram.Grammar.from_json_schema(ref_chain(500)))",
    "500 optional properties": "compile_all(treegram.Grammar.from_json_schema(props(500, False)))",
    "500 required properties": "compile_all(treegram.Grammar.from_json_schema(props(500, True)))",
    "minimum 1e300": (
        'compile_all(treegram.Grammar.from_json_schema({"type": "number", "minimum": 1e300}))'
    ),
    "integer minimum 1e300": (
        'compile_all(treegram.Grammar.from_json_schema({"type": "integer", "minimum": 1e300}))'
    ),
    "maximum 1e-300": (
        'compile_all(treegram.Grammar.from_json_schema({"type": "number", "maximum": 1e-300}))'
    ),
    "exclusiveMinimum 5e-324": (
        "compile_all(treegram.Grammar.from_json_schema("
        '{"type": "number", "exclusiveMinimum": 5e-324}))'
    ),
    "4000-digit const": (
        'compile_all(treegram.Grammar.from_json_schema({"const": int("7" * 4000)}))'
    ),
    "schema text nested 900 arrays deep": (
        'compile_all(treegram.Grammar.from_json_schema("{\\"items\\": " * 900 + "{}" + "}" * 900))'
    ),
    "IR nested 10000 deep": "compile_all(treegram.Grammar.from_ir(deep_ir(10000)))",
    "enum value nested 2000 deep": textwrap.dedent("""
        v = []
        for _ in range(2000):
            v = [v]
        compile_all(treegram.Grammar.from_json_schema({"enum": [v, 1]}))
    """),
    "EBNF with 3000 nested groups": (
        "compile_all(treegram.Grammar.from_ebnf("
        '"root ::= " + "(\\"a\\" " * 3000 + "\\"b\\"" + ")" * 3000))'
    ),
    "shallow inputs from a caller deep in its own stack": textwrap.dedent("""
        def at_depth(n, fn):
            return fn() if n == 0 else at_depth(n - 1, fn)

        limit = sys.getrecursionlimit()
        for schema in (nest_obj(20), nest_arr(50), props(100, False)):
            at_depth(limit - 120, lambda: compile_all(treegram.Grammar.from_json_schema(schema)))
        at_depth(limit - 120, lambda: compile_all(treegram.Grammar.from_ir(deep_ir(140))))
        at_depth(limit - 120, lambda: compile_all(treegram.Grammar.from_ebnf(
            'root ::= ' + '("a" ' * 90 + '"b"' + ')' * 90)))
    """),
    "deep grammar through GrammarCompiler": textwrap.dedent("""
        vocab = [bytes([b]) for b in range(256)] + [b"<eos>"]
        compiler = treegram.GrammarCompiler(treegram.TokenizerInfo(vocab, stop_token_ids=[256]))
        cg = compiler.compile_json_schema(json.dumps(nest_arr(300)), any_whitespace=False)
        m = treegram.GrammarMatcher(cg)
        assert m.accept_string("[" * 300 + "1" + "]" * 300) and m.is_completed()
        assert not treegram.GrammarMatcher(cg).accept_string("[" * 301 + "1")
    """),
}

# case -> (code, exception class name, words the message must contain)
REFUSES = {
    "nesting past MAX_NESTING_DEPTH": (
        "treegram.Grammar.from_json_schema(nest_obj(MAX_NESTING_DEPTH + 5))",
        "GrammarError",
        ["MAX_NESTING_DEPTH"],
    ),
    "$ref chain past MAX_NESTING_DEPTH": (
        "treegram.Grammar.from_json_schema(ref_chain(MAX_NESTING_DEPTH + 5))",
        "GrammarError",
        ["MAX_NESTING_DEPTH"],
    ),
    "schema text nested 100000 deep": (
        'treegram.Grammar.from_json_schema("[" * 100000 + "]" * 100000)',
        "GrammarError",
        ["nested deeper"],
    ),
    "5000-digit const in JSON text": (
        'treegram.Grammar.from_json_schema(\'{"const": \' + "9" * 5000 + "}")',
        "GrammarError",
        ["digits"],
    ),
    "5000-digit const in a dict": (
        'treegram.Grammar.from_json_schema({"const": int("9" * 4000) * 10 ** 1000})',
        "GrammarError",
        ["/const", "digits"],
    ),
    "5000-digit minimum in a dict": (
        'treegram.Grammar.from_json_schema({"type": "integer",'
        ' "minimum": -int("9" * 4000) * 10 ** 1000})',
        "GrammarError",
        ["/minimum", "digits"],
    ),
    "5000-digit EBNF repetition count": (
        "treegram.Grammar.from_ebnf('root ::= \"a\"{' + '9' * 5000 + '}')",
        "GrammarSyntaxError",
        ["repetition count", "digits"],
    ),
    "5000-digit regex repetition count": (
        "treegram.Grammar.from_regex('a{' + '9' * 5000 + '}')",
        "RegexSyntaxError",
        ["repetition count", "digits"],
    ),
    "EBNF parentheses past MAX_EXPR_DEPTH": (
        'treegram.Grammar.from_ebnf("root ::= " + "(\\"a\\" " * (MAX_EXPR_DEPTH + 1)'
        ' + ")" * (MAX_EXPR_DEPTH + 1))',
        "GrammarSyntaxError",
        ["parentheses nested deeper"],
    ),
    "IR past MAX_EXPR_DEPTH": (
        "treegram.Grammar.from_ir(deep_ir(MAX_EXPR_DEPTH + 1))",
        "GrammarError",
        ["MAX_EXPR_DEPTH"],
    ),
    "IR past MAX_EXPR_DEPTH to build_automaton": (
        "build_automaton(deep_ir(MAX_EXPR_DEPTH + 1))",
        "GrammarError",
        ["MAX_EXPR_DEPTH"],
    ),
    "properties not an object": (
        'treegram.Grammar.from_json_schema({"type": "object", "properties": "notadict"})',
        "GrammarError",
        ["properties at #/properties", "object"],
    ),
    "required not a list": (
        'treegram.Grammar.from_json_schema({"type": "object", "required": 5})',
        "GrammarError",
        ["required at #/required"],
    ),
    "allOf not a list": (
        'treegram.Grammar.from_json_schema({"allOf": "x"})',
        "GrammarError",
        ["allOf at #/allOf"],
    ),
    "nested schema not an object": (
        'treegram.Grammar.from_json_schema({"properties": {"a": {"items": 3}}})',
        "GrammarError",
        ["/properties/a/items must be an object or a boolean"],
    ),
    "minimum not a number": (
        'treegram.Grammar.from_json_schema({"minimum": True})',
        "GrammarError",
        ["minimum at #/minimum"],
    ),
    "minLength null": (
        'treegram.Grammar.from_json_schema({"type": "string", "minLength": None})',
        "GrammarError",
        ["minLength"],
    ),
    "pattern not a string": (
        'treegram.Grammar.from_json_schema({"pattern": 5})',
        "GrammarError",
        ["pattern at #/pattern"],
    ),
    "enum not a list": (
        'treegram.Grammar.from_json_schema({"enum": 5})',
        "GrammarError",
        ["enum at #/enum"],
    ),
}


def _run(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + code + EPILOGUE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("code", COMPILES.values(), ids=list(COMPILES))
def test_large_inputs_compile(code):
    proc = _run(code)
    assert proc.returncode == 0 and "CASE-OK" in proc.stdout, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]


@pytest.mark.parametrize("case", REFUSES.values(), ids=list(REFUSES))
def test_bad_inputs_raise_treegram_errors(case):
    code, name, words = case
    probe = textwrap.dedent(f"""
        try:
            {code}
        except treegram.errors.TreegramError as exc:
            assert isinstance(exc, ValueError)
            print("RAISED", json.dumps([type(exc).__name__, str(exc)]))
        else:
            raise SystemExit("no error")
    """)
    proc = _run(probe)
    assert proc.returncode == 0 and "CASE-OK" in proc.stdout, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RAISED "))
    got_name, message = json.loads(line[len("RAISED ") :])
    assert got_name == name, (got_name, message)
    for word in words:
        assert word in message, (word, message)


def test_without_a_large_stack_thread_deep_input_is_still_a_grammar_error():
    """Where no large-stack thread can start, deep work runs on the caller's stack under
    the default limit and overflowing it is a GrammarError, never a RecursionError."""
    code = textwrap.dedent("""
        import treegram.ir._deep as deep
        deep._start = lambda target: None
        try:
            treegram.Grammar.from_json_schema(nest_obj(400))
        except treegram.errors.GrammarError as exc:
            assert "too deeply nested" in str(exc), exc
        else:
            raise SystemExit("no error")
        assert sys.getrecursionlimit() == limit_before
        g = treegram.Grammar.from_json_schema(nest_obj(5))  # shallow input: unaffected
        compile_all(g)
    """)
    proc = _run(code)
    assert proc.returncode == 0 and "CASE-OK" in proc.stdout, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]


def test_concurrent_deep_compiles_restore_the_recursion_limit():
    code = textwrap.dedent("""
        import threading
        errors = []

        def work(d):
            try:
                compile_all(treegram.Grammar.from_json_schema(nest_arr(d)))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(300 + 20 * i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors
    """)
    proc = _run(code)
    assert proc.returncode == 0 and "CASE-OK" in proc.stdout, proc.stderr[-3000:]
