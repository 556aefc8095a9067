"""The built-in JSON grammar.

Its language is exactly that of xgrammar's ``Grammar.builtin_json_grammar()``: the root
is an object or an array with no whitespace before or after it; whitespace between
tokens is ``[ \\n\\r\\t]*``; strings reject raw ``"``, ``\\`` and U+0000-U+001F; numbers
follow RFC 8259.

Layout for fast token masks: each lexeme (``string``, ``number``) is its own rule whose
body can be classified without looking at the caller, and carries a lookahead
assertion on what can follow it, so tokens that run past its end are mostly decided
locally too. Whitespace is inlined as a character class (no rule call per blank).
"""

from __future__ import annotations

from functools import cache

from treegram.grammar._ebnf import parse_ebnf
from treegram.grammar._ir import GrammarIR

__all__ = ["builtin_json_grammar_ir", "BUILTIN_JSON_EBNF"]

BUILTIN_JSON_EBNF = r"""
# JSON text: an object or an array, nothing around it.
root ::= object | array
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" [ \n\r\t]* ("}" | member ([ \n\r\t]* "," [ \n\r\t]* member)* [ \n\r\t]* "}")
member ::= string [ \n\r\t]* ":" [ \n\r\t]* value
array ::= "[" [ \n\r\t]* ("]" | value ([ \n\r\t]* "," [ \n\r\t]* value)* [ \n\r\t]* "]")
# A string is followed by ':' (key) or by ',', '}' or ']' (value).
string ::= "\"" ([^"\\\x00-\x1f] | "\\" escape)* "\"" (= [ \n\r\t]* [,:\]}])
escape ::= ["\\/bfnrt] | "u" [0-9A-Fa-f]{4}
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+\-]? [0-9]+)? (= [ \n\r\t]* [,\]}])
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
