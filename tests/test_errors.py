"""treegram.errors: every error is a TreegramError and the stdlib types callers catch;
where xgrammar 0.2.8 raises RuntimeError, treegram's error is a RuntimeError too."""

from __future__ import annotations

import pytest

import treegram as tg
from treegram import errors

# the errors xgrammar raises as RuntimeError (or a RuntimeError subclass)
BOTH = [
    errors.GrammarError,
    errors.GrammarSyntaxError,
    errors.RegexSyntaxError,
    errors.UnsupportedSchemaError,
    errors.UndefinedRuleError,
    errors.InvalidStructuralTagError,
    errors.UnsupportedStructuralTagError,
    errors.BitmaskError,
    errors.BitmaskIndexError,
    errors.DeserializeFormatError,
    errors.DeserializeVersionError,
    errors.TokenizerMismatchError,
]


@pytest.mark.parametrize("cls", BOTH, ids=lambda c: c.__name__)
def test_value_and_runtime_error(cls):
    assert issubclass(cls, errors.TreegramError)
    assert issubclass(cls, ValueError) and issubclass(cls, RuntimeError)


def test_every_public_error_is_a_treegram_error():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.TreegramError), name


@pytest.mark.parametrize(
    "make",
    [
        lambda: tg.Grammar.from_ebnf("root ::= ("),
        lambda: tg.Grammar.from_ebnf("root ::= x"),
        lambda: tg.Grammar.from_regex("(a"),
        lambda: tg.Grammar.from_json_schema("{not json"),
        lambda: tg.Grammar.from_json_schema({"type": "foo"}),
        lambda: tg.Grammar.from_lark("start: ("),
    ],
)
def test_compile_errors_are_caught_as_runtime_error(make):
    # what an engine written against xgrammar does: except RuntimeError
    with pytest.raises(RuntimeError):
        make()
    with pytest.raises(ValueError):
        make()


def test_errors_that_stay_value_errors_only():
    # bad arguments and token ids: xgrammar raises TypeError/ValueError or only warns
    for cls in (errors.ArgumentError, errors.TokenizerError, errors.InvalidTokenIdError):
        assert issubclass(cls, ValueError) and not issubclass(cls, RuntimeError)
    assert issubclass(errors.MatcherStateError, RuntimeError)
