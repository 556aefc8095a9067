"""xgrammar's EBNF macros: ``Regex(...)`` and ``Substring(...)``.

The EBNF scanner hands a macro call over as one token holding its parsed arguments
(:class:`MacroCall`); :func:`expand_macro` turns it into an IR expression plus any helper
rules it needs.

``Regex(pattern, flags="...", json_string=true)``
    The strings ``pattern`` matches in full (treegram's regex frontend). ``flags`` holds
    ``i`` (ASCII case folding), ``s`` (``.`` matches a line feed) and ``u`` (no effect:
    patterns are always Unicode). Without a ``flags`` argument ``.`` matches every code
    point, as in ``Grammar.from_regex``; with one, ``.`` excludes ``\\n`` unless ``s`` is
    given. A leading ``(?i)`` is the ``i`` flag. ``json_string=true`` keeps only the
    strings that can appear unescaped inside a JSON string: no ``"``, ``\\`` or control
    character U+0000..U+001F.
``Substring("c0", "c1", ...)``
    The concatenation of any run of consecutive chunks ``ci ... cj``, or the empty
    string: ``Substring("ab", "cd")`` is ``"" | "ab" | "cd" | "abcd"``.

Both follow xgrammar 0.2.8, which defines them; the lookaround assertions that xgrammar
silently drops inside ``Regex`` are refused here, as in ``Grammar.from_regex``, because
dropping them would accept strings the pattern rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

from treegram.errors import RegexSyntaxError
from treegram.grammar._ir import Bytes, CharClass, Choice, Expr, Repeat, Rule, RuleRef, Seq
from treegram.grammar._ranges import Ranges, complement, intersect

__all__ = ["MacroCall", "expand_macro", "SUPPORTED_MACROS"]

#: Macros this module expands.
SUPPORTED_MACROS = frozenset({"Regex", "Substring"})

_REGEX_FLAGS = frozenset("isu")
# What a JSON string may hold without escapes.
_JSON_STRING_CHARS: Ranges = complement(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))


@dataclass(frozen=True)
class MacroCall:
    """A parsed macro call: ``positional`` string arguments and ``named`` ones
    (str, bool or int values), in text order."""

    name: str
    positional: tuple[str, ...]
    named: tuple[tuple[str, object], ...]


class MacroArgumentError(Exception):
    """Raised by :func:`expand_macro`; the EBNF parser turns it into a located
    GrammarSyntaxError."""


def expand_macro(call: MacroCall, helper_prefix: str) -> tuple[Expr, list[Rule]]:
    """The IR of ``call`` and the helper rules it needs (named ``helper_prefix`` + suffix).

    Raises
    ------
    MacroArgumentError
        Wrong arguments (count, names, types or flag letters).
    RegexSyntaxError
        ``Regex``'s pattern is malformed or unsupported.
    """
    if call.name == "Regex":
        return _expand_regex(call), []
    return _expand_substring(call, helper_prefix)


def _expand_regex(call: MacroCall) -> Expr:
    from treegram.grammar._regex import regex_to_expr

    if len(call.positional) != 1:
        raise MacroArgumentError(
            f"Regex expects exactly one string argument (the pattern), got {len(call.positional)}"
        )
    pattern = call.positional[0]
    flags: str | None = None
    json_string = False
    for key, value in call.named:
        if key == "flags":
            if not isinstance(value, str):
                raise MacroArgumentError('Regex argument flags must be a string such as "is"')
            bad = sorted(set(value) - _REGEX_FLAGS)
            if bad:
                raise MacroArgumentError(
                    f"Regex flag {bad[0]!r} is not supported (flags may hold i, s and u)"
                )
            flags = value
        elif key == "json_string":
            if not isinstance(value, bool):
                raise MacroArgumentError("Regex argument json_string must be true or false")
            json_string = value
        else:
            raise MacroArgumentError(
                f"Regex has no argument named {key!r} (it takes flags= and json_string=)"
            )
    ignore_case = flags is not None and "i" in flags
    if pattern.startswith("(?i)"):
        ignore_case, pattern = True, pattern[4:]
    dot_all = flags is None or "s" in flags
    try:
        expr = regex_to_expr(pattern, dot_all=dot_all, ignore_case=ignore_case)
    except RegexSyntaxError as err:
        raise MacroArgumentError(f"Regex pattern {call.positional[0]!r}: {err}") from None
    if json_string:
        restricted = _restrict(expr, _JSON_STRING_CHARS)
        # Nothing left: a class no code point belongs to matches nothing.
        expr = CharClass(()) if restricted is None else restricted
    return expr


def _restrict(expr: Expr, allowed: Ranges) -> Expr | None:
    """``expr`` with every character outside ``allowed`` removed; None if no string is
    left. Only rule-free regex IR (Bytes, CharClass, Seq, Choice, Repeat) occurs here."""
    if isinstance(expr, Bytes):
        # UTF-8 continuation and lead bytes are >= 0x80, so a byte check is a code point check.
        ok = all(any(lo <= b <= hi for lo, hi in allowed) for b in set(expr.data) if b < 0x80)
        return expr if ok else None
    if isinstance(expr, CharClass):
        members = complement(expr.ranges) if expr.negated else expr.ranges
        kept = intersect(members, allowed)
        return CharClass(kept) if kept else None
    if isinstance(expr, Seq):
        items = [_restrict(item, allowed) for item in expr.items]
        return None if any(i is None for i in items) else Seq(tuple(items))  # type: ignore[arg-type]
    if isinstance(expr, Choice):
        alts = [a for a in (_restrict(item, allowed) for item in expr.items) if a is not None]
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else Choice(tuple(alts))
    if isinstance(expr, Repeat):
        item = _restrict(expr.item, allowed)
        if item is None:
            return Bytes(b"") if expr.min == 0 else None
        return Repeat(item, expr.min, expr.max)
    raise TypeError(f"unexpected regex IR node {type(expr).__name__}")  # pragma: no cover


def _expand_substring(call: MacroCall, prefix: str) -> tuple[Expr, list[Rule]]:
    if call.named:
        raise MacroArgumentError(
            f"Substring takes only string arguments, got a named argument {call.named[0][0]!r}"
        )
    # Empty chunks add no strings: a run through one is the run without it.
    chunks = [c.encode("utf-8", "surrogatepass") for c in call.positional if c]
    if not chunks:
        return Bytes(b""), []
    # run_i ::= c_i | c_i run_{i+1}: every run of chunks that starts at chunk i.
    names = [f"{prefix}_{i}" for i in range(len(chunks))]
    rules = []
    for i, chunk in enumerate(chunks):
        if i + 1 < len(chunks):
            body: Expr = Seq((Bytes(chunk), Choice((Bytes(b""), RuleRef(names[i + 1])))))
        else:
            body = Bytes(chunk)
        rules.append(Rule(names[i], body))
    return Choice((Bytes(b""), *(RuleRef(n) for n in names))), rules
