"""xgrammar's rule attributes ``name[lazy]``, ``name[max_chars=N]``,
``name[temperature=T]`` and ``name[capture="x"]`` (EBNF and Lark).

``temperature`` and ``capture`` do not change the language: they are kept on the rule
(:attr:`~treegram.ir.Rule.temperature`, :attr:`~treegram.ir.Rule.capture`) for the
matcher. ``lazy`` alone is kept on the rule too (:attr:`~treegram.ir.Rule.lazy`, with the
rules its body references inlined; they must not be recursive) and applied by the
automaton builder. ``max_chars`` (with or without ``lazy``) changes the rule's language
here: the rule body (inlined the same way) becomes a code point automaton
(:class:`~treegram.ir.Dfa`), which is restricted and written back as helper rules.

``lazy``
    The rule matches as little as it can: it keeps the strings none of whose proper
    prefixes it matches (the automaton loses every transition out of an accepting
    state), as xgrammar 0.2.8 does.
``max_chars=N``
    The rule keeps the strings of at most ``N`` characters (code points). xgrammar 0.2.8
    only counts some of the characters (in measurements, a literal alternative or text
    matched by a referenced rule could run past the bound); treegram bounds the rule's
    whole text, a suffix or stop marker included.

Both need a rule whose text is characters: a recursive rule or a token-id element
(``Token(...)``, ``<|name|>``: no text before a vocabulary gives it one) is refused.

``unique`` (treegram's own, what JSON Schema's ``uniqueItems`` over strings compiles to)
does not change the rule's language either: it is kept on the rule
(:attr:`~treegram.ir.Rule.unique`) and makes the matcher refuse a completion of the rule
whose text, decoded as a JSON string, equals that of an earlier completion taken by the
same occurrence of the calling rule. The rule must not derive the empty text.

``max_string_chars=N`` (treegram's own, what JSON Schema's ``maxLength`` beside a pattern
or a format compiles to) is kept on the rule (:attr:`~treegram.ir.Rule.max_string_chars`):
the rule reads the content of one JSON string, and the matcher keeps it to at most ``N``
decoded characters (an escape is one), where an automaton would need a state per length.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from treegram.ir import Bytes, CaptureMarker, CharClass, Choice, Expr, Repeat, Rule, RuleRef, Seq

__all__ = [
    "RULE_ATTRIBUTES",
    "CAPTURE_NAME",
    "MAX_TOKENS",
    "parse_rule_attributes",
    "parse_capture_name",
    "apply_rule_attributes",
]

#: Attribute names that are applied; others are refused by the parsers.
_MARKER_KEYS = frozenset(
    f"capture_hidden_{kind}_{form}"
    for kind in ("suffix", "stop")
    for form in ("bytes", "text", "before_bytes", "split")
)
RULE_ATTRIBUTES = frozenset(
    {
        "lazy",
        "max_chars",
        "max_tokens",
        "temperature",
        "capture",
        "stop_capture",
        "unique",
        "max_string_chars",
        *_MARKER_KEYS,
    }
)
#: The largest token budget of an EBNF rule (Lark's own limit, 1,000,000, is checked by the
#: Lark parser; structural tags' any_text allows up to 2**31 - 1 and prints as EBNF).
MAX_TOKENS = 2**31 - 1
#: What a capture name may hold (xgrammar's rule).
CAPTURE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")

_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


class RuleAttributeError(ValueError):
    """A bad attribute list or a rule the attributes cannot apply to (the parser adds the
    position)."""


def parse_rule_attributes(text: str) -> dict[str, object]:
    """Parse the inside of ``[...]``: ``lazy``, ``unique``, ``max_chars=N``, ``temperature=T``,
    ``capture`` / ``capture="name"`` (``True``: the rule's own name) and a capture
    marker (``capture_hidden_{suffix,stop}_{bytes=N,text="...",before_bytes=N}``, with
    ``stop_capture="name"``; key ``"marker"``), comma separated."""
    attrs: dict[str, object] = {}
    marker: dict[str, object] = {}
    for part in text.split(","):
        item = part.strip()
        key, eq, value = (s.strip() for s in item.partition("="))
        if key not in RULE_ATTRIBUTES:
            raise RuleAttributeError(
                f"rule attribute {key!r} is not supported "
                '(supported: lazy, max_chars=N, temperature=T, capture="name")'
            )
        if key in attrs or key in marker:
            raise RuleAttributeError(f"rule attribute {key!r} is given twice")
        if key in _MARKER_KEYS or key == "stop_capture":
            if not eq:
                raise RuleAttributeError(f"rule attribute {key!r} needs a value")
            if key != "stop_capture" and any(k != "stop_capture" for k in marker):
                raise RuleAttributeError("a rule has at most one capture_hidden_* attribute")
            marker[key] = value
        elif key == "capture":
            attrs[key] = parse_capture_name(value) if eq else True
        elif key in ("lazy", "unique"):
            if eq:
                raise RuleAttributeError(f"rule attribute {key!r} takes no value")
            attrs[key] = True
        elif key == "temperature":
            attrs[key] = parse_temperature(value)
        elif key == "max_tokens":
            if not (value.isascii() and value.isdigit()) or len(value) > 10:
                raise RuleAttributeError("rule attribute max_tokens needs a positive integer")
            if not 1 <= int(value) <= MAX_TOKENS:
                raise RuleAttributeError(
                    f"max_tokens must be between 1 and {MAX_TOKENS:,}, got {int(value)}"
                )
            attrs[key] = int(value)
        else:
            if not (value.isascii() and value.isdigit()) or len(value) > 9:
                raise RuleAttributeError(f"rule attribute {key} needs a non-negative integer")
            attrs[key] = int(value)
    if marker:
        capture = marker.pop("stop_capture", None)
        if not marker:
            raise RuleAttributeError("stop_capture requires a capture_hidden_* attribute")
        ((key, value),) = marker.items()
        kind, form = key[len("capture_hidden_") :].split("_", 1)
        size, data, split = 0, None, None
        if form == "split":
            names = str(value)[1:-1].split() if str(value)[:1] == '"' == str(value)[-1:] else []
            if len(names) != 2:
                raise RuleAttributeError(
                    f'{key} needs "body_rule marker_rule" (two rule names), got {value!r}'
                )
            split = (names[0], names[1])
        elif form == "text":
            try:
                loaded = json.loads(str(value))
            except json.JSONDecodeError:
                loaded = None
            if not isinstance(loaded, str) or not loaded:
                raise RuleAttributeError(f"{key} needs a non-empty JSON string, got {value!r}")
            data = loaded.encode("utf-8", "surrogatepass")
        else:
            if not (str(value).isascii() and str(value).isdigit()) or len(str(value)) > 9:
                raise RuleAttributeError(f"{key} needs a non-negative integer, got {value!r}")
            size = int(str(value))
        attrs["marker"] = CaptureMarker(
            kind,
            size,
            data,
            form == "before_bytes",
            None if capture is None else parse_capture_name(str(capture)),
            split,
        )
    return attrs


def parse_capture_name(text: str) -> str:
    """The value of ``capture=``: a double-quoted name of letters, digits, ``_``, ``-``
    and ``.``.

    Raises
    ------
    RuleAttributeError
        Not a quoted string, empty, or holding other characters.
    """
    text = text.strip()
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        raise RuleAttributeError(f"expected string literal after capture=, got {text!r}")
    name = text[1:-1]
    if not name:
        raise RuleAttributeError("capture name must not be empty")
    if not CAPTURE_NAME.fullmatch(name):
        raise RuleAttributeError(
            f"capture name must only contain letters, digits, '_', '-' and '.', got {name!r}"
        )
    return name


def parse_temperature(text: str) -> float:
    """The value of ``temperature=`` (a decimal number, optionally with an exponent).

    Raises
    ------
    RuleAttributeError
        Not a number, or not a finite non-negative one.
    """
    if not _NUMBER.fullmatch(text.strip()):
        raise RuleAttributeError(f"expected a number after temperature=, got {text.strip()!r}")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise RuleAttributeError(f"temperature must be a finite non-negative number, got {text!r}")
    return value


class _Rules:
    """The ``conv`` that :func:`dfa_expr` writes helper rules into."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.rules: dict[str, Expr] = {}

    def new_rule(self, base: str) -> str:
        k = 0
        while f"{base}{k}" in self.taken:
            k += 1
        name = f"{base}{k}"
        self.taken.add(name)
        return name


def apply_rule_attributes(
    rules: list[Rule], attrs: Mapping[str, dict[str, object]], on_error: Callable[[str, str], None]
) -> list[Rule]:
    """``rules`` with the attributes of ``attrs`` (rule name -> attributes) applied;
    helper rules are appended. ``on_error(rule, message)`` must raise."""
    from treegram.frontends.json_schema import dfa_expr
    from treegram.ir import Dfa, DfaLimitError

    by_name = {r.name: r for r in rules}
    conv = _Rules(set(by_name))
    out = []
    for rule in rules:
        a = dict(attrs.get(rule.name) or {})
        if "temperature" in a:
            rule = replace(rule, temperature=float(a.pop("temperature")))  # type: ignore[arg-type]
        if "capture" in a:
            name = a.pop("capture")
            rule = replace(rule, capture=rule.name if name is True else str(name))
        if "marker" in a:
            rule = replace(rule, marker=a.pop("marker"))  # type: ignore[arg-type]
        if "max_tokens" in a:
            rule = replace(rule, max_tokens=int(a.pop("max_tokens")))  # type: ignore[call-overload]
        if a.pop("unique", False):
            rule = replace(rule, unique=True)
        if "max_string_chars" in a:
            rule = replace(rule, max_string_chars=int(a.pop("max_string_chars")))  # type: ignore[call-overload]
        if not a:
            out.append(rule)
            continue
        try:
            expr = _inline(rule.body, by_name, (rule.name,))
        except RuleAttributeError as err:
            on_error(rule.name, str(err))
        if set(a) == {"lazy"}:
            # kept on the rule (printed back as [lazy]); the automaton builder restricts
            # the rule's automaton, so its body only needs to call no rule
            out.append(replace(rule, body=expr, lazy=True))
            continue
        try:
            d = Dfa.from_expr(expr)
            if "max_chars" in a:
                d = d.with_length(0, int(a["max_chars"]))  # type: ignore[arg-type]
            if a.get("lazy"):
                d = _lazy(d)
            body = dfa_expr(conv, d, f"{rule.name}_attr", _encode)
        except DfaLimitError as err:
            on_error(rule.name, f"rule attributes make the rule too large: {err}")
        out.append(replace(rule, body=CharClass(()) if body is None else body))
    out.extend(Rule(name, body) for name, body in conv.rules.items())
    return out


def _lazy(d):
    from treegram.ir import Dfa

    trans = [() if d.accept[s] else row for s, row in enumerate(d.trans)]
    return Dfa(trans, list(d.accept)).minimize()


def _encode(ranges: tuple[tuple[int, int], ...]) -> Expr:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Bytes(chr(ranges[0][0]).encode("utf-8", "surrogatepass"))
    return CharClass(ranges)


def _inline(expr: Expr, rules: Mapping[str, Rule], path: tuple[str, ...]) -> Expr:
    if isinstance(expr, RuleRef):
        tokens = rules[expr.name].tokens
        if tokens is not None:
            # a token-id element has no characters before a vocabulary gives it a text
            # (xgrammar counts its decoded length while matching); its rule's body is
            # empty, so inlining it would silently drop the alternative
            raise RuleAttributeError(
                f"lazy and max_chars need a rule that reads text, not the token-id element "
                f"{tokens.text} ({' -> '.join(path)})"
            )
        if expr.name in path:
            raise RuleAttributeError(
                f"lazy and max_chars need a rule that is not recursive ({' -> '.join(path)} "
                f"-> {expr.name})"
            )
        return _inline(rules[expr.name].body, rules, (*path, expr.name))
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(_inline(i, rules, path) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_inline(expr.item, rules, path), expr.min, expr.max)
    return expr
