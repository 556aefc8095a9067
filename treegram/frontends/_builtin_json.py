"""The built-in JSON grammar.

Its language is exactly that of xgrammar's ``Grammar.builtin_json_grammar()``: the root
is an object or an array with no whitespace before or after it; whitespace between
tokens is ``[ \\n\\r\\t]*``; strings reject raw ``"``, ``\\`` and U+0000-U+001F; numbers
follow RFC 8259.

Layout for fast token masks: a token is decided without looking at the parser stack when
all of its bytes are read inside one rule call. Tokens such as ``":``, ``",`` or ``1}``
cross the end of a string or number, so strings and numbers are *inlined* and each rule
carries on with the punctuation that follows them: ``members`` reads a key, its colon, a
value and then either ``,`` and the next member or the closing ``}``; ``elements`` does
the same inside arrays. Only tokens that close a container and go on (``"},``) still
depend on the enclosing context.
"""

from __future__ import annotations

from functools import cache

from treegram.frontends._ebnf import parse_ebnf
from treegram.ir import GrammarIR

__all__ = ["builtin_json_grammar_ir", "BUILTIN_JSON_EBNF"]

_WS = r"[ \n\r\t]*"
_STRING = r'"\"" ([^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9A-Fa-f]{4}))* "\""'
_NUMBER = r'"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+\-]? [0-9]+)?'
_VALUE = (
    f'({_STRING} | {_NUMBER} | "true" | "false" | "null"'
    f' | "{{" {_WS} ("}}" | members) | "[" {_WS} ("]" | elements))'
)

BUILTIN_JSON_EBNF = f"""
# JSON text: an object or an array, nothing around it.
root ::= "{{" {_WS} ("}}" | members) | "[" {_WS} ("]" | elements)
# After "{{" or ",": key, colon, value, then the next member or the closing brace.
members ::= {_STRING} {_WS} ":" {_WS} {_VALUE} {_WS} ("," {_WS} members | "}}")
# After "[" or ",": a value, then the next element or the closing bracket.
elements ::= {_VALUE} {_WS} ("," {_WS} elements | "]")
"""


@cache
def builtin_json_grammar_ir() -> GrammarIR:
    """Return the IR of the built-in JSON grammar (cached; the IR is immutable).

    Returns
    -------
    GrammarIR
        Grammar whose root rule ``root`` accepts exactly a JSON object or array, with
        whitespace ``[ \\n\\r\\t]*`` allowed between tokens only.
    """
    return parse_ebnf(BUILTIN_JSON_EBNF, "root")
