"""The public :class:`Grammar` object, and the public names of the grammar stack.

:class:`Grammar` sits above the frontends (:mod:`treegram.frontends`) and the grammar IR
(:mod:`treegram.ir`); this module also re-exports their public names
(``parse_ebnf``, ``grammar_to_ebnf``, the IR nodes, the nesting limits) so that
``treegram.grammar`` stays the one place users import them from.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Collection, Mapping
from dataclasses import replace

from treegram._json import dump_json, load_json
from treegram.errors import (
    ArgumentError,
    ArgumentTypeError,
    DeserializeFormatError,
    GrammarError,
    UndefinedRuleError,
)
from treegram.frontends import (
    builtin_json_grammar_ir,
    json_schema_to_ir,
    parse_ebnf,
    regex_to_ir,
    structural_tag_from_args,
    structural_tag_text,
    structural_tag_to_ir,
)
from treegram.ir import (
    MAX_CODEPOINT,
    MAX_EXPR_DEPTH,
    MAX_NESTING_DEPTH,
    SHALLOW_DEPTH,
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    expr_depth_error,
    grammar_to_ebnf,
    ir_facts,
    renamed_refs,
    run_sized,
)
from treegram.tokenizer import TokenizerInfo

__all__ = [
    "Grammar",
    "check_named_grammars",
    "parse_ebnf",
    "grammar_to_ebnf",
    "Bytes",
    "CharClass",
    "Seq",
    "Choice",
    "Repeat",
    "RuleRef",
    "Expr",
    "Rule",
    "GrammarIR",
    "MAX_CODEPOINT",
    "MAX_NESTING_DEPTH",
    "MAX_EXPR_DEPTH",
]


class Grammar:
    """An immutable grammar: a validated :class:`GrammarIR` and its root rule.

    Build one with a static constructor (:meth:`from_ebnf`, :meth:`builtin_json_grammar`,
    :meth:`from_ir`). Grammars compare equal when their IRs are equal, are hashable, and
    are safe to share across threads (nothing in them ever changes).
    """

    __slots__ = ("_ir", "_depth", "_text")

    def __init__(self, ir: GrammarIR) -> None:
        self._depth = _validate_ir(ir)
        self._ir = ir
        # what str() prints when the frontend wrote the grammar in xgrammar's normal form
        # (structural tags: the parsed tag, replaced by its text on the first str(), the
        # same text whichever thread renders it); None: treegram's own EBNF (to_ebnf)
        self._text: object = None

    @staticmethod
    def from_ebnf(text: str, *, root_rule_name: str = "root") -> Grammar:
        """Parse a grammar written in EBNF.

        Parameters
        ----------
        text : str
            Grammar text in treegram's EBNF dialect (xgrammar's, without macros).
        root_rule_name : str, default "root"
            Name of the rule the grammar starts from.

        Returns
        -------
        Grammar

        Raises
        ------
        GrammarSyntaxError
            Malformed text (``line``/``column`` locate it), duplicate rules, or
            unsupported xgrammar macros.
        UndefinedRuleError
            A referenced rule is not defined.
        GrammarError
            The grammar is empty or lacks the root rule.
        """
        return Grammar(parse_ebnf(text, root_rule_name))

    @staticmethod
    def builtin_json_grammar() -> Grammar:
        """The built-in JSON grammar: an object or an array, as in xgrammar.

        Returns
        -------
        Grammar
        """
        return Grammar(builtin_json_grammar_ir())

    @staticmethod
    def from_regex(pattern: str) -> Grammar:
        """A grammar whose language is the strings ``pattern`` matches in full.

        Parameters
        ----------
        pattern : str
            ECMA-262-style regular expression (the dialect of JSON Schema ``pattern``).

        Returns
        -------
        Grammar

        Raises
        ------
        RegexSyntaxError
            Malformed pattern or an unsupported construct (backreferences, lookaround,
            word boundaries, inline flags); ``position`` locates it.
        """
        return Grammar(regex_to_ir(pattern))

    @staticmethod
    def from_lark(
        text: str,
        *,
        tokenizer_info: TokenizerInfo | None = None,
        named_grammars: Mapping[str, Grammar | str] | None = None,
    ) -> Grammar:
        """Parse a grammar written in Lark (xgrammar 0.2.8's subset; it starts at ``start``).

        Parameters
        ----------
        text : str
            Lark grammar text: rules, terminals, literals (flag ``i``), ranges, regexes
            (flags ``i s u``), ``? * + ~n ~n..m``, ``%ignore``, ``%import common.X``,
            ``%json {schema}`` and ``@name`` (see ``treegram.frontends.lark``).
        tokenizer_info : TokenizerInfo, optional
            Named special tokens (``<|eot|>``) must be tokens of its vocabulary (an
            unknown one is a located error). They are looked up again in the vocabulary
            of the compiler that compiles the grammar, with or without it.
        named_grammars : mapping of str to Grammar or str, optional
            The grammars ``@name`` refers to (Lark text with its own ``start`` rule, or a
            Grammar); keys are the names without ``@``.

        Returns
        -------
        Grammar

        Raises
        ------
        GrammarSyntaxError
            Malformed or unsupported Lark (priorities, templates, special tokens,
            ``%declare``...); ``line``/``column`` locate it.
        ArgumentTypeError
            ``named_grammars`` is not a mapping of str to Grammar or str.
        GrammarError
            A name of ``named_grammars`` is not a valid grammar name.
        """
        from .frontends import lark_to_ir

        if tokenizer_info is not None and not isinstance(tokenizer_info, TokenizerInfo):
            raise ArgumentTypeError(
                "tokenizer_info must be a TokenizerInfo or None, got "
                f"{type(tokenizer_info).__name__}"
            )
        known = None if tokenizer_info is None else _spelled_in(tokenizer_info)
        return Grammar(lark_to_ir(text, check_named_grammars(named_grammars), known_token=known))

    @staticmethod
    def from_json_schema(
        schema,
        *,
        any_whitespace: bool = True,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = True,
        max_whitespace_cnt: int | None = None,
        unsupported: str | Collection[str] = "error",
        unknown_format: str = "warn",
        format_assertion: bool = True,
        canonical_integers: bool = True,
        remote_schemas: Mapping[str, dict | bool] | None = None,
        any_order: bool = False,
        print_converted_ebnf: bool = False,
    ) -> Grammar:
        """A grammar for the JSON documents that ``schema`` validates (xgrammar's options).

        Parameters
        ----------
        schema : str, dict or pydantic model class
            The JSON Schema.
        any_whitespace, indent, separators, strict_mode, max_whitespace_cnt
            Output layout and defaults, as in xgrammar 0.2.8 (see ``json_schema_to_ir``).
        unsupported : "error", "warn" or collection of str, default "error"
            The widening option: ``"warn"`` serves a keyword treegram cannot compile exactly
            by widening it to the language without it (a warning names the keyword and its
            JSON pointer; no valid instance is rejected); a collection of keyword names
            (``{"uniqueItems", "format"}``) does so for those only.
        unknown_format : "warn", "ignore" or "error", default "warn"
            A ``format`` treegram does not know is an annotation (JSON Schema 2020-12):
            any string, with a warning (``"warn"``) or without (``"ignore"``);
            ``"error"`` refuses it as an unsupported keyword.
        format_assertion : bool, default True
            Enforce the formats treegram knows; ``False`` makes every ``format`` an
            annotation (JSON Schema 2020-12 without the format-assertion vocabulary).
        canonical_integers : bool, default True
            An ``integer`` is written only as ``63``; ``False`` also accepts ``63.0``
            (JSON Schema's value semantics).
        remote_schemas : mapping of str to dict or bool, optional
            Documents that ``$ref`` may name outside the schema, keyed by retrieval URI
            (see ``json_schema_to_ir``); a reference found nowhere is refused.
        any_order : bool, default False
            Object members in any order, as in xgrammar: only each key's value schema is
            checked (required keys may be missing, keys may repeat), and the member count
            lies between ``max(minProperties, len(required))`` and ``maxProperties``.
        print_converted_ebnf : bool, default False
            Print the grammar's EBNF text (a debugging aid, as in xgrammar).

        Returns
        -------
        Grammar

        Raises
        ------
        UnsupportedSchemaError
            A keyword cannot be compiled exactly (named, with its JSON pointer).
        """
        grammar = Grammar(
            json_schema_to_ir(
                schema,
                any_whitespace=any_whitespace,
                indent=indent,
                separators=separators,
                strict_mode=strict_mode,
                max_whitespace_cnt=max_whitespace_cnt,
                unsupported=unsupported,
                unknown_format=unknown_format,
                format_assertion=format_assertion,
                canonical_integers=canonical_integers,
                remote_schemas=remote_schemas,
                any_order=any_order,
            )
        )
        if print_converted_ebnf:
            print(grammar.to_ebnf())
        return grammar

    @staticmethod
    def from_structural_tag(*args, **kwargs) -> Grammar:
        """A grammar for the outputs a structural tag describes (xgrammar's two forms).

        Call it as ``from_structural_tag(structural_tag)`` or, in the legacy form,
        ``from_structural_tag(tags, triggers)``.

        Parameters
        ----------
        structural_tag : StructuralTag, str, dict or pydantic model
            The structural tag (:mod:`treegram.structural_tag`): an object, its JSON form
            (``{"type": "structural_tag", "format": {...}}``) as a str or dict, or
            xgrammar's pydantic ``StructuralTag``.
        tags : list of StructuralTagItem
            (Legacy) tags ``begin schema end``; the output is free text in which a trigger
            starts one of them.
        triggers : list of str
            (Legacy) the trigger strings; every tag's ``begin`` starts with exactly one.

        Returns
        -------
        Grammar

        Raises
        ------
        InvalidStructuralTagError
            A malformed structural tag; the message names the field by its path.
        UnsupportedStructuralTagError
            A token-id format, an XML ``json_schema`` style, or a token/character budget.
        GrammarError
            A content's JSON Schema, regex or EBNF is invalid (its frontend's error).
        """
        tag = structural_tag_from_args(args, kwargs)
        grammar = Grammar(structural_tag_to_ir(tag))
        grammar._text = tag  # rendered when first printed: most grammars never are
        return grammar

    @staticmethod
    def union(*grammars: Grammar) -> Grammar:
        """A grammar for the strings that any one of ``grammars`` accepts (xgrammar's).

        Parameters
        ----------
        *grammars : Grammar
            At least one grammar. Their rules are kept under the names ``g{i}_{name}``
            (``i`` the grammar's position); the new root is ``root``.

        Returns
        -------
        Grammar

        Raises
        ------
        ArgumentError
            No grammar, or an argument that is not a :class:`Grammar` (named by position).
        """
        return _combine(grammars, "union", Choice)

    @staticmethod
    def concat(*grammars: Grammar) -> Grammar:
        """A grammar for a string of ``grammars[0]`` followed by one of ``grammars[1]``...
        (xgrammar's).

        Parameters
        ----------
        *grammars : Grammar
            At least one grammar; rules are renamed as in :meth:`union`.

        Returns
        -------
        Grammar

        Raises
        ------
        ArgumentError
            No grammar, or an argument that is not a :class:`Grammar` (named by position).
        """
        return _combine(grammars, "concat", Seq)

    @staticmethod
    def from_ir(ir: GrammarIR) -> Grammar:
        """Wrap an IR produced by a frontend.

        Parameters
        ----------
        ir : GrammarIR
            The grammar; its root rule and every referenced rule must exist.

        Returns
        -------
        Grammar

        Raises
        ------
        GrammarError
            ``ir`` is not a GrammarIR or lacks its root rule.
        UndefinedRuleError
            A rule reference names a rule that is not defined.
        """
        return Grammar(ir)

    @property
    def ir(self) -> GrammarIR:
        """The grammar IR (immutable)."""
        return self._ir

    @property
    def root_rule_name(self) -> str:
        """Name of the root rule."""
        return self._ir.root

    def to_ebnf(self) -> str:
        """The grammar as EBNF text, root rule first; it parses back to an equal grammar.

        Returns
        -------
        str
        """
        return grammar_to_ebnf(self._ir)

    def serialize_json(self) -> str:
        """The grammar as a versioned JSON document (xgrammar's name): its EBNF text and
        root rule; :meth:`deserialize_json` rebuilds an equal grammar.

        Returns
        -------
        str
        """
        return dump_json("Grammar", {"root": self._ir.root, "ebnf": self.to_ebnf()})

    @staticmethod
    def deserialize_json(json_string: str) -> Grammar:
        """Rebuild a grammar from :meth:`serialize_json` output.

        Raises
        ------
        DeserializeFormatError
            Not such a document, or its grammar text does not parse.
        DeserializeVersionError
            Written by another serialization version (``get_serialization_version``).
        """
        obj = load_json(json_string, "Grammar", {"root": str, "ebnf": str})
        try:
            return Grammar(parse_ebnf(obj["ebnf"], root_rule_name=obj["root"]))
        except GrammarError as exc:
            raise DeserializeFormatError(f"Grammar.deserialize_json: {exc}") from None

    def __str__(self) -> str:
        """The grammar as EBNF text: :meth:`to_ebnf`, except for a structural tag's
        grammar, which prints in xgrammar's normal form (as xgrammar does; it parses back
        with :meth:`from_ebnf` to a grammar accepting the same strings)."""
        text = self._text
        if text is None:
            return self.to_ebnf()
        if not isinstance(text, str):
            text = self._text = structural_tag_text(text)  # type: ignore[arg-type]
            if text is None:
                return self.to_ebnf()
        return text

    def __repr__(self) -> str:
        return f"Grammar(root_rule_name={self._ir.root!r}, num_rules={len(self._ir.rules)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Grammar):
            return NotImplemented
        # dataclass == recurses per level
        return run_sized(
            max(self._depth, other._depth) > SHALLOW_DEPTH, operator.eq, self._ir, other._ir
        )

    def __hash__(self) -> int:
        return run_sized(self._depth > SHALLOW_DEPTH, hash, self._ir)


def _spelled_in(tokenizer_info: TokenizerInfo):
    """Whether some token of the vocabulary (not a special one) is spelled ``name``."""
    spelled: set[bytes] | None = None

    def known(name: str) -> bool:
        nonlocal spelled
        if spelled is None:
            special = set(tokenizer_info.special_token_ids)
            vocab = tokenizer_info.decoded_vocab
            spelled = {bytes(t) for i, t in enumerate(vocab) if i not in special}
        return name.encode("utf-8") in spelled

    return known


def _validate_ir(ir: GrammarIR) -> int:
    """Check that ``ir`` has its root rule, no dangling rule references and no expression
    nested deeper than ``MAX_EXPR_DEPTH``; return its depth."""
    if not isinstance(ir, GrammarIR):
        raise GrammarError(f"ir must be a GrammarIR, got {type(ir).__name__}")
    if not ir.has_rule(ir.root):
        raise GrammarError(f"root rule {ir.root!r} is not defined in the grammar IR")
    facts = ir_facts(ir)  # one walk, each shared node once
    if any(not ir.has_rule(name) for name in facts.ref_names):
        _raise_undefined_reference(ir)
    if facts.depth > MAX_EXPR_DEPTH:
        raise expr_depth_error("grammar IR")
    return facts.depth


def _raise_undefined_reference(ir: GrammarIR) -> None:
    """Raise UndefinedRuleError naming the first undefined reference and its rule."""
    for rule in ir.rules:
        stack: list[Expr] = [rule.body]
        if rule.lookahead is not None:
            stack.append(rule.lookahead)
        while stack:
            e = stack.pop()
            if isinstance(e, RuleRef):
                if not ir.has_rule(e.name):
                    raise UndefinedRuleError(
                        f"rule {e.name!r} is not defined (referenced by rule {rule.name!r})"
                    )
            elif isinstance(e, (Seq, Choice)):
                stack.extend(e.items)
            elif isinstance(e, Repeat):
                stack.append(e.item)
    raise AssertionError("unreachable: an undefined reference was found")  # pragma: no cover


def _renamed(expr: Expr, prefix: str) -> Expr:
    """``expr`` with every rule reference prefixed."""
    return renamed_refs(expr, lambda name: prefix + name)


def _combine(grammars: tuple, what: str, node: type) -> Grammar:
    """The union (``node`` = Choice) or concatenation (Seq) of ``grammars``' languages."""
    if not grammars:
        raise ArgumentError(f"Grammar.{what} needs at least one grammar")
    for i, g in enumerate(grammars):
        if not isinstance(g, Grammar):
            raise ArgumentError(
                f"Grammar.{what}: grammars[{i}] must be a Grammar, got {type(g).__name__}"
            )

    def build() -> GrammarIR:
        # "g" + position + "_" decomposes uniquely, so no two renamed rules collide, and
        # no renamed rule is called "root".
        rules: list[Rule] = []
        roots: list[Expr] = []
        for i, g in enumerate(grammars):
            prefix = f"g{i}_"
            for r in g.ir.rules:
                look = None if r.lookahead is None else _renamed(r.lookahead, prefix)
                rules.append(
                    replace(
                        r,
                        name=prefix + r.name,
                        body=_renamed(r.body, prefix),
                        lookahead=look,
                        marker=r.marker and r.marker.renamed(f"{prefix}{{}}".format),
                    )
                )
            roots.append(RuleRef(prefix + g.ir.root))
        return GrammarIR((Rule("root", node(tuple(roots))), *rules), "root")

    deep = max(g._depth for g in grammars) > SHALLOW_DEPTH
    return Grammar(run_sized(deep, build))


_GRAMMAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def check_named_grammars(named_grammars: object) -> dict[str, Grammar | str]:
    """``named_grammars`` of ``from_lark`` / ``compile_lark`` as a dict, checked.

    Raises
    ------
    ArgumentTypeError
        Not a mapping, a key that is not a str, or a value that is neither a Grammar
        nor Lark text.
    GrammarError
        A key that ``@name`` cannot spell (letters, digits, ``_`` and ``-``).
    """
    if named_grammars is None:
        return {}
    if not isinstance(named_grammars, Mapping):
        raise ArgumentTypeError(
            "named_grammars must be a dictionary of names to Grammar or Lark text, got "
            f"{type(named_grammars).__name__}"
        )
    for key, value in named_grammars.items():
        if not isinstance(key, str):
            raise ArgumentTypeError(
                f"named_grammars names must be strings, got {type(key).__name__} {key!r}"
            )
        if not isinstance(value, (Grammar, str)):
            raise ArgumentTypeError(
                "named_grammars values must be Grammar instances or Lark strings, got "
                f"{type(value).__name__} for {key!r}"
            )
        if not _GRAMMAR_NAME.fullmatch(key):
            raise GrammarError(
                f"Invalid named grammar name {key!r}: a name holds letters, digits, '_' and "
                "'-' and does not start with a digit or '-'"
            )
    return dict(named_grammars)
