"""xgrammar's EBNF macros: ``Regex(...)``, ``Substring(...)`` and ``TagDispatch(...)``.

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
``TagDispatch(("tag", rule), ..., excludes=("s", ...), loop_after_dispatch=true)``
    Free text that may end anywhere, read by the Aho-Corasick automaton of the tags
    and excludes; when it reaches a tag's own state, that tag's rule must follow (a
    tag given twice offers both rules), or, where the tag is a prefix of longer tags,
    one of them goes on; after the rule free text starts again, or, with
    ``loop_after_dispatch=false``, the macro ends. As in xgrammar 0.2.8, a tag is
    recognised only at its own state: a short tag that ends inside a longer tag's
    prefix (``"b"`` inside ``"ab"`` while ``"abc"`` is a tag) is read as free text.
    Free text never contains an ``excludes`` string (one that ends where a tag does
    wins). Built as one helper rule per live automaton state.

Both follow xgrammar 0.2.8, which defines them; the lookaround assertions that xgrammar
silently drops inside ``Regex`` are refused here, as in ``Grammar.from_regex``, because
dropping them would accept strings the pattern rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

from treegram.errors import RegexSyntaxError
from treegram.ir import (
    Bytes,
    CharClass,
    Choice,
    Expr,
    Ranges,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    complement_ranges,
    intersect_ranges,
    token_rule,
)

__all__ = ["MacroCall", "expand_macro", "SUPPORTED_MACROS"]

#: Macros this module expands.
SUPPORTED_MACROS = frozenset({"Regex", "Substring", "TagDispatch", "TokenTagDispatch"})

_REGEX_FLAGS = frozenset("isu")
# What a JSON string may hold without escapes.
_JSON_STRING_CHARS: Ranges = complement_ranges(((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))


@dataclass(frozen=True)
class MacroName:
    """A bare name inside a macro tuple (a rule reference) and its text position."""

    name: str
    pos: int


@dataclass(frozen=True)
class MacroCall:
    """A parsed macro call: ``positional`` arguments (str, or tuples of str and
    :class:`MacroName`) and ``named`` ones (str, bool, int or tuple), in text order."""

    name: str
    positional: tuple[object, ...]
    named: tuple[tuple[str, object], ...]


class MacroArgumentError(Exception):
    """Raised by :func:`expand_macro`; the EBNF parser turns it into a located
    GrammarSyntaxError."""


def expand_macro(call: MacroCall, helper_prefix: str) -> tuple[Expr, list[Rule], list[MacroName]]:
    """The IR of ``call``, the helper rules it needs (named ``helper_prefix`` + suffix)
    and the user rules it references.

    Raises
    ------
    MacroArgumentError
        Wrong arguments (count, names, types or flag letters).
    RegexSyntaxError
        ``Regex``'s pattern is malformed or unsupported.
    """
    if call.name == "Regex":
        return _expand_regex(call), [], []
    if call.name == "Substring":
        return (*_expand_substring(call, helper_prefix), [])
    if call.name == "TokenTagDispatch":
        return _expand_token_tag_dispatch(call)
    return _expand_tag_dispatch(call, helper_prefix)


def _expand_regex(call: MacroCall) -> Expr:
    from treegram.frontends._regex import regex_to_expr

    if len(call.positional) != 1 or not isinstance(call.positional[0], str):
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
        members = complement_ranges(expr.ranges) if expr.negated else expr.ranges
        kept = intersect_ranges(members, allowed)
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
    if not all(isinstance(c, str) for c in call.positional):
        raise MacroArgumentError("Substring takes only string arguments, got a tuple")
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


def _expand_tag_dispatch(call: MacroCall, prefix: str) -> tuple[Expr, list[Rule], list[MacroName]]:
    tags: list[tuple[str, MacroName]] = []
    for arg in call.positional:
        if not (
            isinstance(arg, tuple)
            and len(arg) == 2
            and isinstance(arg[0], str)
            and isinstance(arg[1], MacroName)
        ):
            raise MacroArgumentError(
                "Each tag dispatch element must be a pair (tag, rule): a string and a rule name"
            )
        if not arg[0]:
            raise MacroArgumentError("Tag must be a non-empty string literal")
        tags.append((arg[0], arg[1]))
    excludes: list[str] = []
    loop = True
    for key, value in call.named:
        if key == "excludes":
            if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
                raise MacroArgumentError("excludes must be a tuple of strings")
            if any(not v for v in value):
                raise MacroArgumentError("Exclude must be a non-empty string literal")
            excludes.extend(value)
        elif key == "loop_after_dispatch":
            if not isinstance(value, bool):
                raise MacroArgumentError("loop_after_dispatch must be a boolean literal")
            loop = value
        else:
            raise MacroArgumentError(
                f"Unknown named argument for TagDispatch: {key} (it takes excludes= and "
                "loop_after_dispatch=)"
            )
    for ex in excludes:
        for tag, _ in tags:
            if tag.startswith(ex):
                raise MacroArgumentError(
                    f"Exclude string must not be a prefix of trigger string: {ex}"
                )
    expr, rules = _tag_dispatch_rules(tags, excludes, loop, prefix)
    return expr, rules, [r for _, r in tags]


def _expand_token_tag_dispatch(call: MacroCall) -> tuple[Expr, list[Rule], list[MacroName]]:
    """``TokenTagDispatch((id, rule), ..., excludes=(id, ...), loop_after_dispatch=b)``:
    any tokens but the triggers and the excludes, where a trigger token (read by id)
    calls its rule; after the rule the free tokens start again, or, without the loop, the
    macro ends. The text is token-id elements: ``(ExcludeToken(triggers, excludes) |
    Token(t) rule | ...)*``. Returns the expression, its token rules and the rules it
    calls."""
    tags: list[tuple[int, MacroName]] = []
    for arg in call.positional:
        if not (isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], MacroName)):
            raise MacroArgumentError(
                "Each TokenTagDispatch element must be a pair (token_id, rule)"
            )
        if not isinstance(arg[0], int) or isinstance(arg[0], bool):
            raise MacroArgumentError("Token trigger ID must be a non-negative integer")
        tags.append((arg[0], arg[1]))
    excludes: set[int] = set()
    loop = True
    for key, value in call.named:
        if key == "excludes":
            if not isinstance(value, tuple) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise MacroArgumentError("excludes must be a tuple of non-negative integers")
            excludes.update(value)  # type: ignore[arg-type]
        elif key == "loop_after_dispatch":
            if not isinstance(value, bool):
                raise MacroArgumentError("loop_after_dispatch must be a boolean literal")
            loop = value
        else:
            raise MacroArgumentError(f"Unknown named argument for TokenTagDispatch: {key}")
    for t, _ in tags:
        if t in excludes:
            raise MacroArgumentError(f"Token trigger ID {t} must not overlap with exclude token ID")
    free = token_rule(TokenSet(tuple(sorted(excludes | {t for t, _ in tags})), exclude=True))
    rules = {free.name: free}
    dispatch: list[Expr] = []
    for t, rule in tags:
        trigger = token_rule(TokenSet((t,)))
        rules[trigger.name] = trigger
        dispatch.append(Seq((RuleRef(trigger.name), RuleRef(rule.name))))
    if loop:
        expr: Expr = Repeat(Choice((RuleRef(free.name), *dispatch)), 0, None)
    else:
        tail: list[Expr] = [Repeat(Choice(tuple(dispatch)), 0, 1)] if dispatch else []
        expr = Seq((Repeat(RuleRef(free.name), 0, None), *tail))
    return expr, list(rules.values()), [r for _, r in tags]


def _tag_dispatch_rules(
    tags: list[tuple[str, MacroName]], excludes: list[str], loop: bool, prefix: str
) -> tuple[Expr, list[Rule]]:
    """One rule per live Aho-Corasick state (no tag or exclude ends there)."""
    children: list[dict[int, int]] = [{}]
    tag_rules: list[list[str]] = [[]]
    is_exclude = [False]

    def insert(text: str) -> int:
        node = 0
        for ch in text:
            cp = ord(ch)
            nxt = children[node].get(cp)
            if nxt is None:
                nxt = len(children)
                children[node][cp] = nxt
                children.append({})
                tag_rules.append([])
                is_exclude.append(False)
            node = nxt
        return node

    for tag, rule in tags:
        node = insert(tag)
        if rule.name not in tag_rules[node]:
            tag_rules[node].append(rule.name)
    for ex in excludes:
        is_exclude[insert(ex)] = True

    # Failure links in BFS order; a node inherits "an exclude ends here" from its failure
    # node, but dispatches only if it is a tag itself (xgrammar's semantics).
    fail = [0] * len(children)
    dead = list(is_exclude)
    dispatch = tag_rules
    order = [0]
    for node in order:
        for cp, child in children[node].items():
            order.append(child)
            if node:
                f = fail[node]
                while f and cp not in children[f]:
                    f = fail[f]
                fail[child] = children[f].get(cp, 0)
            dead[child] = dead[child] or dead[fail[child]]

    def goto(node: int, cp: int) -> int:
        while node and cp not in children[node]:
            node = fail[node]
        return children[node].get(cp, 0)

    alphabet = sorted({cp for node in children for cp in node})
    live = [n for n in order if not dead[n] and not dispatch[n]]
    # Tags that longer tags extend: the rule may follow, or the longer tag go on.
    forks = [n for n in order if not dead[n] and dispatch[n] and children[n]]
    names = {n: f"{prefix}_{i}" for i, n in enumerate(live + forks)}

    def dispatched(node: int) -> Expr:
        targets = [RuleRef(r) for r in dispatch[node]]
        body: Expr = targets[0] if len(targets) == 1 else Choice(tuple(targets))
        return Seq((body, RuleRef(names[0]))) if loop else body

    def step(char: Expr, target: int) -> Expr | None:
        if dead[target]:
            return None
        if target in names:
            return Seq((char, RuleRef(names[target])))
        return Seq((char, dispatched(target)))

    def char_of(cps: list[int]) -> Expr:
        if len(cps) == 1:
            return Bytes(chr(cps[0]).encode("utf-8"))
        return CharClass(_ranges(cps))

    rules = []
    for node in live:
        groups: dict[int, list[int]] = {}
        for cp in alphabet:
            groups.setdefault(goto(node, cp), []).append(cp)
        # the free text may end here; every character outside the groups below
        # restarts at the root state
        special = [cp for target, cps in groups.items() if target != 0 for cp in cps]
        alts: list[Expr] = [Bytes(b""), Seq((CharClass(_ranges(special), True), RuleRef(names[0])))]
        for target, cps in groups.items():
            if target != 0:
                alt = step(char_of(cps), target)
                if alt is not None:
                    alts.append(alt)
        rules.append(Rule(names[node], Choice(tuple(alts))))
    for node in forks:
        alts = [dispatched(node)]
        for cp, child in children[node].items():
            alt = step(Bytes(chr(cp).encode("utf-8")), child)
            if alt is not None:
                alts.append(alt)
        rules.append(Rule(names[node], Choice(tuple(alts))))
    return RuleRef(names[0]), rules


def _ranges(cps: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for cp in sorted(cps):
        if out and cp == out[-1][1] + 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return tuple((a, b) for a, b in out)
