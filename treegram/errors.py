"""Exception types raised by treegram.

Every error derives from :class:`TreegramError` and also from the standard library type
that callers of xgrammar-style APIs expect (``ValueError`` for bad input,
``RuntimeError`` for state problems), so ``except ValueError`` keeps working. Where
xgrammar 0.2.8 raises ``RuntimeError`` (a grammar, regex, Lark or JSON Schema that does not
compile, a bitmask of the wrong shape, serialized data it cannot read) the error is both a
``ValueError`` and a ``RuntimeError``, so engines that catch either keep working.
"""

from __future__ import annotations

__all__ = [
    "TreegramError",
    "ArgumentError",
    "ArgumentTypeError",
    "GrammarError",
    "GrammarSyntaxError",
    "LarkSyntaxError",
    "RegexSyntaxError",
    "UnsupportedSchemaError",
    "UndefinedRuleError",
    "InvalidStructuralTagError",
    "UnsupportedStructuralTagError",
    "TokenizerError",
    "EmptyVocabularyError",
    "InvalidTokenIdError",
    "BitmaskError",
    "BitmaskIndexError",
    "MatcherStateError",
    "DeserializeFormatError",
    "DeserializeVersionError",
    "InvalidJSONError",
    "ConfigError",
    "TemperatureError",
    "TokenizerMismatchError",
    "MissingDependencyError",
    "CacheStoreError",
    "WorkerError",
    "DraftTreeError",
]


class TreegramError(Exception):
    """Root of every exception raised by treegram."""


class ArgumentError(TreegramError, ValueError):
    """An argument has the wrong type or value (the message names it)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument has the wrong type (a bool or a float where an int is needed): also a
    ``TypeError``, which is what Python raises for wrong types."""


class GrammarError(TreegramError, ValueError, RuntimeError):
    """A grammar is malformed or cannot be compiled. Also a ``RuntimeError``, the type
    xgrammar raises for it."""


class GrammarSyntaxError(GrammarError):
    """EBNF text could not be parsed.

    Attributes
    ----------
    line, column : int
        1-based position of the offending character in the grammar text.
    """

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.line = line
        self.column = column


class LarkSyntaxError(GrammarSyntaxError):
    """Lark grammar text could not be parsed; the message reads ``Lark error at line L,
    column C: ...``, as xgrammar's does, followed by the offending source line and a
    caret under the column when ``source_line`` is given."""

    def __init__(
        self, message: str, line: int, column: int, source_line: str | None = None
    ) -> None:
        text = f"Lark error at line {line}, column {column}: {message}"
        if source_line is not None:
            text += f"\n{source_line}\n{' ' * (column - 1)}^"
        GrammarError.__init__(self, text)
        self.line = line
        self.column = column


class RegexSyntaxError(GrammarSyntaxError):
    """A regular expression could not be parsed, or uses an unsupported construct.

    Attributes
    ----------
    pattern : str
        The regular expression.
    position : int
        0-based index of the offending character in ``pattern``.
    line, column : int
        1-based line and column of that character (as for every GrammarSyntaxError).
    """

    def __init__(self, message: str, pattern: str, position: int) -> None:
        preview = pattern if len(pattern) <= 80 else pattern[:77] + "..."
        Exception.__init__(self, f"{message} (position {position} in regex {preview!r})")
        self.message = message
        self.pattern = pattern
        self.position = position
        self.line = pattern.count("\n", 0, position) + 1
        self.column = position - (pattern.rfind("\n", 0, position) + 1) + 1

    def __reduce__(self) -> tuple:
        return (type(self), (self.message, self.pattern, self.position))


class UnsupportedSchemaError(GrammarError):
    """A JSON Schema keyword cannot be compiled exactly; the message names the keyword and
    its JSON pointer."""


class UndefinedRuleError(GrammarError):
    """A rule reference names a rule that is not defined."""


class InvalidStructuralTagError(GrammarError):
    """A structural tag is malformed (a missing or mistyped field, a tag that matches no
    trigger, an unlimited content without an end string...); the message names the field
    by its path, such as ``format.tags[1].begin``. Also a ``RuntimeError``, the type
    xgrammar raises for it."""


class UnsupportedStructuralTagError(InvalidStructuralTagError):
    """A structural tag uses a format or option that treegram does not compile (token-level
    formats, XML styles of ``json_schema``, token and character budgets); the message names
    it by its path."""


class TokenizerError(TreegramError, ValueError):
    """Tokenizer vocabulary or metadata is invalid."""


class EmptyVocabularyError(TokenizerError):
    """The vocabulary has no tokens."""


class InvalidTokenIdError(TreegramError, ValueError):
    """A token id is outside ``[0, vocab_size)``."""


class BitmaskError(TreegramError, ValueError, RuntimeError):
    """A token bitmask has the wrong dtype, shape, device or memory layout. Also a
    ``RuntimeError``, the type xgrammar raises for it."""


class MatcherStateError(TreegramError, RuntimeError):
    """An operation is impossible in the matcher's current state (e.g. rollback too far)."""


class BitmaskIndexError(BitmaskError, IndexError):
    """A bitmask row index is not an integer in ``[0, rows)``."""


class MissingDependencyError(TreegramError, ImportError):
    """An optional package that a feature needs is not installed (the message names it)."""


class WorkerError(TreegramError, RuntimeError):
    """Work handed to a :class:`~treegram.pool.WorkerPool` failed, or the pool is closed.

    When a chunk raised, the original exception is ``__cause__`` and the message names the
    chunk's index range.
    """


class DraftTreeError(TreegramError, ValueError, RuntimeError):
    """A draft tree (parents, links or tree attention mask) is malformed; the message names
    the argument and the offending value. Also a ``RuntimeError``, the type xgrammar raises
    for it (engines catch that)."""


class DeserializeFormatError(TreegramError, ValueError, RuntimeError):
    """Serialized data is corrupt, truncated or inconsistent (the message says where).
    Also a ``RuntimeError``, the base of xgrammar's error of that name."""


class DeserializeVersionError(TreegramError, ValueError, RuntimeError):
    """Serialized data has another format version than this treegram reads. Also a
    ``RuntimeError``, the base of xgrammar's error of that name."""


class InvalidJSONError(DeserializeFormatError):
    """A JSON document treegram reads is not valid JSON or nests deeper than
    :func:`treegram.get_max_recursion_depth` (xgrammar's error of that name)."""


class ConfigError(ArgumentError, RuntimeError):
    """A process-wide setting got an invalid value. Also a ``RuntimeError``, as xgrammar's
    configuration errors are."""


class TemperatureError(ArgumentError, RuntimeError):
    """A ``default_temperature`` or a ``temperatures`` output (dtype, shape, device,
    indices) is invalid; the message names the argument. Also a ``RuntimeError``, as
    xgrammar raises it."""


class TokenizerMismatchError(TreegramError, ValueError, RuntimeError):
    """Serialized data was compiled for another tokenizer than the one given. Also a
    ``RuntimeError``, as xgrammar's deserialization errors are."""


class CacheStoreError(TreegramError, OSError):
    """A cache store or one of its entries cannot be used: the store's directory is not a
    directory, or an entry is not a regular file, is a symbolic link or is too large (the
    message names the path). :class:`GrammarCompiler` logs it and compiles instead."""
