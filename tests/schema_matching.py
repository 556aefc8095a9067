"""Shared helpers of the grammar tests: compile over a byte-level vocabulary (256
single-byte tokens + ``<eos>``), make and parse random grammars, check that a matcher
accepts a whole text, check a table of passing and failing texts (and make the two tests of
such a table), check xgrammar's recorded acceptance cases, check a located Lark error, and
draw JSON values with hypothesis."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from functools import cache

import pytest

import treegram
from treegram.frontends.json_schema._convert import json_schema_to_ir


@cache
def byte_compiler() -> treegram.GrammarCompiler:
    """One compiler over the byte-level vocabulary, shared by every test."""
    vocab = [bytes([b]) for b in range(256)] + [b"<eos>"]
    return treegram.GrammarCompiler(treegram.TokenizerInfo(vocab, stop_token_ids=[256]))


def parsed_grammars(
    make_text: Callable[[random.Random], str], rng: random.Random, tries: int
) -> Iterator[treegram.Grammar]:
    """The grammars of ``tries`` random EBNF texts ``make_text(rng)``, skipping the texts
    that are not a valid grammar (GrammarError)."""
    for _ in range(tries):
        try:
            yield treegram.Grammar.from_ebnf(make_text(rng))
        except treegram.errors.GrammarError:
            continue


def random_ebnf(rng: random.Random) -> str:
    """A random EBNF text of three rules: literals (multi-byte ones too), character
    classes, rule references, bounded and unbounded repetitions, nested a few levels."""

    def atom(depth: int) -> str:
        kind = rng.random()
        if depth > 3 or kind < 0.3:
            return json.dumps(rng.choice(["a", "bc", "", "é", "\u4e2d", "\U0001f600"]))
        if kind < 0.45:
            return rng.choice(["[a-z]", "[^a]", "[\\u0100-\\U0010ffff]", "[0-9é]"])
        if kind < 0.55:
            return f"r{rng.randrange(3)}"
        if kind < 0.75:
            lo = rng.randrange(0, 3)
            bound = rng.choice([str(lo + rng.randrange(0, 3)), ""])
            return f"({expr(depth + 1)}){{{lo},{bound}}}"
        return f"({expr(depth + 1)})" + rng.choice(["*", "+", "?", ""])

    def expr(depth: int) -> str:
        alts = [
            " ".join(atom(depth) for _ in range(rng.randrange(1, 4)))
            for _ in range(rng.randrange(1, 3))
        ]
        return " | ".join(alts)

    return "root ::= r0\n" + "\n".join(f"r{i} ::= {expr(0)}" for i in range(3))


def compile_schema(schema, **options) -> treegram.CompiledGrammar:
    """``schema`` compiled with ``json_schema_to_ir`` options over the byte vocabulary."""
    ir = json_schema_to_ir(schema, **options)
    return byte_compiler().compile_grammar(treegram.Grammar.from_ir(ir))


def accepts(cg: treegram.CompiledGrammar, text: str) -> bool:
    """Whether a fresh matcher accepts all of ``text`` and is then complete."""
    m = treegram.GrammarMatcher(cg)
    return m.accept_string(text) and m.is_completed()


def assert_table(
    accept: Callable[[str], bool], passing: Iterable[str], failing: Iterable[str]
) -> None:
    """Every ``passing`` text accepted and no ``failing`` one (a failure lists the texts)."""
    assert [s for s in passing if not accept(s)] == []
    assert [s for s in failing if accept(s)] == []


def assert_accepts_table(
    cg: treegram.CompiledGrammar, passing: Iterable[str], failing: Iterable[str]
) -> None:
    """``cg`` accepts every ``passing`` text in full and no ``failing`` one (see accepts and
    assert_table)."""
    assert_table(lambda s: accepts(cg, s), passing, failing)


def acceptance_tests(
    cases: list[tuple[str, list[str], list[str]]], syntax: str, *, id_length: int | None = None
) -> tuple[Callable[..., None], Callable[..., None]]:
    """The two tests of a table of ``(source, passing, failing)`` grammars in ``syntax``
    (``"ebnf"`` or ``"lark"``), each case named by its source (cut to ``id_length``
    characters): treegram accepts every passing text and no failing one, and so does
    xgrammar 0.2.8, the oracle (skipped without it). A test module takes them as
    ``test_acceptance, test_acceptance_matches_xgrammar = acceptance_tests(CASES, "lark")``."""

    def table() -> pytest.MarkDecorator:  # one per test: pytest escapes the ids in place
        ids = [c[0][:id_length] for c in cases]
        return pytest.mark.parametrize("source, passing, failing", cases, ids=ids)

    @table()
    def test_acceptance(
        compiler: treegram.GrammarCompiler, source: str, passing: list[str], failing: list[str]
    ) -> None:
        compile_source = compiler.compile_lark if syntax == "lark" else compiler.compile_grammar
        assert_accepts_table(compile_source(source), passing, failing)

    @table()
    def test_acceptance_matches_xgrammar(
        source: str, passing: list[str], failing: list[str]
    ) -> None:
        xgr = pytest.importorskip("xgrammar")
        from xgrammar.testing import _is_grammar_accept_string

        grammar = xgr.Grammar.from_lark(source) if syntax == "lark" else source
        assert_table(lambda s: _is_grammar_accept_string(grammar, s), passing, failing)

    return test_acceptance, test_acceptance_matches_xgrammar


def assert_recorded_cases(cg: treegram.CompiledGrammar, cases: Iterable[dict]) -> None:
    """Each of xgrammar's recorded ``cases`` (``input``, ``expected``, ``require_termination``,
    ``origin``) gets its expected verdict from a fresh matcher: all of ``input`` accepted, and
    complete where the case requires termination (a failure lists the cases it got wrong)."""
    failures = []
    for case in cases:
        matcher = treegram.GrammarMatcher(cg)
        ok = matcher.accept_string(case["input"])
        if ok and case["require_termination"]:
            ok = matcher.is_completed()
        if ok != case["expected"]:
            failures.append((case["input"][:80], case["expected"], case["origin"]))
    assert not failures, failures


def assert_lark_error(source: str, fragment: str, line: int, column: int) -> None:
    """``Grammar.from_lark(source)`` raises a GrammarSyntaxError (also a ValueError and a
    RuntimeError) holding ``fragment``, located at ``line``/``column`` and laid out as
    xgrammar's (``Lark error at line L, column C: ``, which engines and its tests read)."""
    with pytest.raises(treegram.GrammarSyntaxError) as info:
        treegram.Grammar.from_lark(source)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
    assert (info.value.line, info.value.column) == (line, column)
    assert str(info.value).startswith(f"Lark error at line {line}, column {column}: ")


def exact_validator(schema, draft: str = "2020-12"):
    """A ``jsonschema`` validator for ``schema`` whose ``multipleOf`` is exact decimal
    arithmetic, as JSON Schema defines it (``jsonschema`` divides binary floats, so it
    says 0.3 is not a multiple of 0.1); every other keyword is ``jsonschema``'s own."""
    from fractions import Fraction

    import jsonschema
    from jsonschema.exceptions import ValidationError

    def frac(x):
        return Fraction(x) if isinstance(x, int) else Fraction(str(x))

    def multiple_of(validator, m, instance, schema):
        if not validator.is_type(instance, "number"):
            return
        if (frac(instance) / frac(m)).denominator != 1:
            yield ValidationError(f"{instance!r} is not a multiple of {m}")

    base = {"2020-12": jsonschema.Draft202012Validator, "7": jsonschema.Draft7Validator}[draft]
    cls = jsonschema.validators.extend(base, {"multipleOf": multiple_of})
    return cls(schema)


def json_values(
    *, ints: tuple[int, int], floats: list[float], alphabet: str, max_chars: int, max_leaves: int
):
    """A hypothesis strategy: JSON values built from null, booleans, integers from ``ints[0]``
    to ``ints[1]``, the ``floats`` and strings of at most ``max_chars`` characters of
    ``alphabet``, in arrays and in objects keyed ``a``, ``b``, ``c`` (at most 3 members
    each)."""
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(*ints),
        st.sampled_from(floats),
        st.text(alphabet=alphabet, max_size=max_chars),
    )
    return st.recursive(
        scalars,
        lambda c: st.one_of(
            st.lists(c, max_size=3),
            st.dictionaries(st.sampled_from(["a", "b", "c"]), c, max_size=3),
        ),
        max_leaves=max_leaves,
    )
