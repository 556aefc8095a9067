"""What the Lark modules share: the parsed forms of definitions and markers, Lark's
``common`` terminals, the ``%ignore`` placeholder and the terminal naming rule."""

from __future__ import annotations

from dataclasses import dataclass

from treegram.ir import Expr

__all__ = ["COMMON", "IGNORE", "Definition", "Marker", "is_terminal"]

# Placeholder for the %ignore rule: cannot clash with a Lark name.
IGNORE = "\0ignore"

# Lark's ``common`` terminals, as regular expressions over their language.
_DECIMAL = r"[0-9]+\.[0-9]*|\.[0-9]+"
_FLOAT = rf"(?:{_DECIMAL})(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
COMMON = {
    "DIGIT": "[0-9]",
    "HEXDIGIT": "[a-fA-F0-9]",
    "INT": "[0-9]+",
    "SIGNED_INT": "[+-]?[0-9]+",
    "DECIMAL": _DECIMAL,
    "_EXP": "[eE][+-]?[0-9]+",
    "FLOAT": _FLOAT,
    "SIGNED_FLOAT": rf"[+-]?(?:{_FLOAT})",
    "NUMBER": rf"[0-9]+|{_FLOAT}",
    "SIGNED_NUMBER": rf"[+-]?(?:[0-9]+|{_FLOAT})",
    "ESCAPED_STRING": r'"(?:[^"\\]|\\[^\n])*"',
    "LETTER": "[A-Za-z]",
    "WORD": "[A-Za-z]+",
    "CNAME": "[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": "[ \\t]+",
    "WS": "[ \\t\\f\\r\\n]+",
    "CR": "\\r",
    "LF": "\\n",
    "NEWLINE": "(?:\\r?\\n)+",
    "LCASE_LETTER": "[a-z]",
    "UCASE_LETTER": "[A-Z]",
    "SH_COMMENT": "#[^\\n]*",
    "CPP_COMMENT": "//[^\\n]*",
    "C_COMMENT": r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/",
    "SQL_COMMENT": "--[^\\n]*",
}


def is_terminal(name: str) -> bool:
    """Lark's convention: the first letter after leading underscores is upper case."""
    stripped = name.lstrip("_")
    return bool(stripped) and stripped[0].isupper()


@dataclass(frozen=True)
class Marker:
    """The marker of a ``suffix=`` or ``stop=`` attribute: its expression, where it is,
    the literal text of a case-sensitive string marker and the name of a terminal one."""

    expr: Expr
    pos: int
    literal: str | None = None
    ref: str | None = None
    kind: str = "suffix"  # or "stop"


@dataclass
class Definition:
    name: str
    pos: int
    terminal: bool
    body: Expr | None = None
    # (name, pos) of every name this definition references.
    refs: list | None = None
