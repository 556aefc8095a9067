"""The text of an ECMA-262 ``pattern`` as a JSON Schema *search*: top-level alternatives
and their ``^``/``$`` anchors (a ``pattern`` matches anywhere in the string unless an
alternative is anchored).
"""

from __future__ import annotations

import functools
import unicodedata

__all__ = [
    "ecma_classes",
    "split_alternatives",
    "strip_anchors",
    "has_inner_anchor",
    "outside_chars",
]

# ECMA-262's WhiteSpace and LineTerminator: what \s matches (the regex frontend's \s is
# xgrammar's smaller set), and the line terminators '.' does not match.
_SPACE = "\\t-\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
_SPACE_RANGES = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
)
_MAX_CODEPOINT = 0x10FFFF
_DOT = "[^\\n\\r\\u2028\\u2029]"


def ecma_classes(pattern: str) -> str:
    """``pattern`` with ``\\s``, ``\\S``, ``.`` and the property escapes ``\\p{...}`` /
    ``\\P{...}`` spelled as ECMA-262 defines them (as explicit classes the regex frontend
    reads the same way in any dialect).

    Raises
    ------
    ValueError
        A property escape other than a General_Category value and a few binary
        properties. (``\\S`` and ``\\P{...}`` inside a class are written out as the
        ranges of their complement.)
    """
    out: list[str] = []
    in_class, i = False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and pattern[i + 1 : i + 3] in ("p{", "P{"):
            close = pattern.find("}", i)
            if close < 0:
                raise ValueError(f"unterminated property escape in pattern {pattern!r}")
            ranges = _class_text(property_ranges(pattern[i + 3 : close]))
            if pattern[i + 1] == "P":
                if in_class:  # the complement written out as ranges
                    out.append(_class_text(_complement(property_ranges(pattern[i + 3 : close]))))
                else:
                    out.append(f"[^{ranges}]" if ranges else "[^]")
            else:
                out.append(ranges if in_class else (f"[{ranges}]" if ranges else "[]"))
            i = close + 1
            continue
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_SPACE if in_class else f"[{_SPACE}]")
            elif nxt == "S":
                if in_class:  # the complement written out as ranges
                    out.append(_class_text(_complement(_SPACE_RANGES)))
                else:
                    out.append(f"[^{_SPACE}]")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            out.append(ch)
            if pattern[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
            i += 1
            continue
        elif ch == ".":
            out.append(_DOT)
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def split_alternatives(pattern: str) -> list[str]:
    """Split ``pattern`` at its top-level ``|`` (outside groups, classes and escapes); an
    alternative that is one whole group, ``(...)`` or ``(?:...)``, is split inside too
    (for a search, ``(^a$|b)`` is ``^a$|b``)."""
    parts = []
    for part in _split_top(pattern):
        inner = _group_inside(part)
        parts.extend([part] if inner is None else split_alternatives(inner))
    return parts


def outside_chars(pattern: str, escapes: bool = False):
    """``(index, char, depth)`` for each character outside escapes and classes; ``depth``
    counts the groups around it (a parenthesis counts as outside its own group). With
    ``escapes``, each escape outside classes comes too, as its two characters."""
    depth, in_class, i = 0, False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if escapes and not in_class:
                yield i, pattern[i : i + 2], depth
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        else:
            depth -= ch == ")"
            yield i, ch, depth
            depth += ch == "("
        i += 1


def _split_top(pattern: str) -> list[str]:
    cuts = [i for i, ch, depth in outside_chars(pattern) if ch == "|" and depth == 0]
    bounds = [-1, *cuts, len(pattern)]
    return [pattern[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _group_inside(part: str) -> str | None:
    """The inside of ``part`` when it is exactly one capturing or ``(?:`` group."""
    if not part.startswith("(") or part.startswith(("(?=", "(?!", "(?<")):
        return None
    if part.startswith("(?") and not part.startswith("(?:"):
        return None
    for i, ch, depth in outside_chars(part):
        if ch == ")" and depth == 0:
            if i != len(part) - 1:
                return None  # the group closes before the end (or is quantified)
            return part[3:-1] if part.startswith("(?:") else part[1:-1]
    return None


def strip_anchors(alternative: str) -> tuple[bool, str, bool]:
    left = alternative.startswith("^")
    core = alternative[1:] if left else alternative
    right = False
    if core.endswith("$"):
        backslashes = len(core[:-1]) - len(core[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            right, core = True, core[:-1]
    return left, core, right


def has_inner_anchor(core: str) -> bool:
    """Whether ``core`` holds a ``^`` or ``$`` anchor outside escapes and classes."""
    return any(ch in "^$" for _, ch, _ in outside_chars(core))


# General_Category values and their aliases (Unicode's PropertyValueAliases).
_CATEGORIES = {
    "C": "C", "Other": "C", "Cc": "Cc", "Control": "Cc", "cntrl": "Cc", "Cf": "Cf",
    "Format": "Cf", "Cn": "Cn", "Unassigned": "Cn", "Co": "Co", "Private_Use": "Co",
    "Cs": "Cs", "Surrogate": "Cs", "L": "L", "Letter": "L", "LC": "LC",
    "Cased_Letter": "LC", "Ll": "Ll", "Lowercase_Letter": "Ll", "Lm": "Lm",
    "Modifier_Letter": "Lm", "Lo": "Lo", "Other_Letter": "Lo", "Lt": "Lt",
    "Titlecase_Letter": "Lt", "Lu": "Lu", "Uppercase_Letter": "Lu", "M": "M", "Mark": "M",
    "Combining_Mark": "M", "Mc": "Mc", "Spacing_Mark": "Mc", "Me": "Me",
    "Enclosing_Mark": "Me", "Mn": "Mn", "Nonspacing_Mark": "Mn", "N": "N", "Number": "N",
    "Nd": "Nd", "Decimal_Number": "Nd", "digit": "Nd", "Nl": "Nl", "Letter_Number": "Nl",
    "No": "No", "Other_Number": "No", "P": "P", "Punctuation": "P", "punct": "P",
    "Pc": "Pc", "Connector_Punctuation": "Pc", "Pd": "Pd", "Dash_Punctuation": "Pd",
    "Pe": "Pe", "Close_Punctuation": "Pe", "Pf": "Pf", "Final_Punctuation": "Pf",
    "Pi": "Pi", "Initial_Punctuation": "Pi", "Po": "Po", "Other_Punctuation": "Po",
    "Ps": "Ps", "Open_Punctuation": "Ps", "S": "S", "Symbol": "S", "Sc": "Sc",
    "Currency_Symbol": "Sc", "Sk": "Sk", "Modifier_Symbol": "Sk", "Sm": "Sm",
    "Math_Symbol": "Sm", "So": "So", "Other_Symbol": "So", "Z": "Z", "Separator": "Z",
    "Zl": "Zl", "Line_Separator": "Zl", "Zp": "Zp", "Paragraph_Separator": "Zp",
    "Zs": "Zs", "Space_Separator": "Zs",
}  # fmt: skip
_BINARY = {"Any": ((0, 0x10FFFF),), "ASCII": ((0, 0x7F),)}


def property_ranges(name: str) -> tuple[tuple[int, int], ...]:
    """The code points of a ``\\p{...}`` property: a General_Category value (``L``,
    ``Letter``, ``gc=Lu``, ``General_Category=digit``), ``Any``, ``ASCII``, ``Assigned``
    or ``White_Space``, from Python's ``unicodedata`` (its Unicode version).

    Raises
    ------
    ValueError
        Any other property (scripts, most binary properties).
    """
    key, _, value = name.partition("=")
    if value:
        if key not in ("gc", "General_Category"):
            raise ValueError(f"Unicode property escape \\p{{{name}}} is not supported")
        name = value
    if name in _BINARY:
        return _BINARY[name]
    if name == "White_Space":
        return _WHITE_SPACE
    if name == "Assigned":
        return _category_ranges("Cn", negate=True)
    if name not in _CATEGORIES:
        raise ValueError(f"Unicode property escape \\p{{{name}}} is not supported")
    return _category_ranges(_CATEGORIES[name])


_WHITE_SPACE = (
    (0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
    (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip


@functools.cache
def _category_ranges(category: str, negate: bool = False) -> tuple[tuple[int, int], ...]:
    """Code point ranges whose General_Category is ``category`` (or starts with it, for a
    one-letter group; ``LC`` is Lu, Ll and Lt)."""
    wanted = {"Lu", "Ll", "Lt"} if category == "LC" else None

    def hit(cp: int) -> bool:
        cat = unicodedata.category(chr(cp))
        ok = cat in wanted if wanted else (cat == category or cat[0] == category)
        return ok != negate

    out: list[tuple[int, int]] = []
    start = None
    for cp in range(0x110000):
        if hit(cp):
            if start is None:
                start = cp
        elif start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return tuple(out)


def _complement(ranges) -> list[tuple[int, int]]:
    """The code points outside sorted, disjoint ``ranges``."""
    out, start = [], 0
    for lo, hi in sorted(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    if start <= _MAX_CODEPOINT:
        out.append((start, _MAX_CODEPOINT))
    return out


def _class_text(ranges) -> str:
    """Ranges as the inside of a class, every code point as a ``\\u{...}`` escape
    (surrogates left out: no JSON string decodes to a lone one)."""
    parts = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
            if a <= b:
                parts.append(f"\\u{{{a:x}}}" if a == b else f"\\u{{{a:x}}}-\\u{{{b:x}}}")
    return "".join(parts)
