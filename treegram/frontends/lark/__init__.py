"""Lark frontend: Lark grammar text -> :class:`GrammarIR`.

The accepted subset and its meaning follow xgrammar 0.2.8's ``Grammar.from_lark``:

- definitions ``name: expansions``; names hold letters, digits, ``_`` and ``-``; a name
  whose first letter (after leading ``_``) is upper case is a *terminal*, any other name a
  *rule*; ``?name`` and ``!name`` are plain rules (tree shaping does not change the
  language); the grammar starts at ``start`` (the root rule is named ``root``, as in
  xgrammar, so a printed grammar parses back as EBNF); a definition continues on the
  next line only when that line starts with ``|``; ``-> alias`` at the end of an
  alternative is ignored;
- items: ``"literal"`` (JSON string escapes; flag ``i`` folds ASCII letters),
  ``"a".."z"`` (one code point each), ``/regex/flags`` (flags ``i``, ``s``, ``u``; ``.``
  excludes ``\\n`` unless ``s``), names, ``( )``, ``[ ]`` (optional), ``%json {schema}``
  (a JSON Schema inline), ``@name`` (a grammar from ``named_grammars``), ``%lark { ... }``
  (a nested Lark grammar with its own names, ``start``, ``%ignore`` and options),
  ``%regex {"substring_chunks": [...]}`` / ``{"substring_chars": "..."}`` (any run of
  consecutive chunks or characters, or nothing), and the operators ``? * + ~n ~n..m``
  and ``{n} {n,} {,m} {n,m}``;
- ``%ignore item`` (any number): inside *rules*, anything in the ignored set may follow
  each literal, range, regex, terminal reference or ``%json`` value (not a rule
  reference: the rule adds its own); terminals never contain it; with
  ``%grammar_options {"allow_initial_skip": true}`` it may also come first;
- ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` for the terminals of
  Lark's ``common`` library;
- rule attributes ``name[lazy]``, ``name[max_chars=N]``, ``name[max_tokens=N]`` (a token
  budget per occurrence, enforced by the matcher) and ``name[temperature=T]`` (see
  :mod:`treegram.frontends._rule_attrs`), ``name[suffix=M]`` / ``name[stop=M]`` (the
  marker ``M`` a string, a regex or a terminal name: the rule is the lazy rule
  ``body M``); as in xgrammar, a lazy, suffix, stop or temperature rule is handled like
  a terminal: it references terminals (and sub-grammars) only and ``%ignore`` applies
  after it, not inside; ``name[capture]`` / ``capture="x"`` record the rule's text
  (:meth:`GrammarMatcher.get_captures`; :attr:`Rule.capture`), and the marker of a
  ``suffix`` / ``stop`` rule is left out of captures as xgrammar does (``stop_capture="x"``
  records it; :class:`~treegram.ir.CaptureMarker`);
- xgrammar's dynamic tool-call dispatch (``start: (tool | ...)* tail`` over any-text
  heads ending in a trigger) and lazy any-text heads used on their own become the
  byte-level free text of structural tags, xgrammar's ``TagDispatch`` (see
  :func:`._lazy.lower_lazy`).

Refused with :class:`GrammarSyntaxError` (line and column, and the source line with a
caret under the column): priorities ``name.2``, templates, parametric grammars (``::``,
``%if``), ``&`` and ``~`` on terminals, ``%declare`` / ``%override`` / other
directives, malformed special tokens (each with its own message; well-formed ones,
``<|name|>``, ``<name>``, ``<[1,3-5]>``, ``<[^1]>`` and ``<[*]>``, are token-id elements
that read one whole token), ``max_tokens`` on the rules of a dynamic dispatch,
``lazy`` / ``max_chars`` on a recursive rule, terminals that reference rules or
themselves, unknown names and imports, duplicate definitions, and a grammar without
``start``.

Modules, from the entry point down (each imports only modules below it):

- ``_lower``: :func:`lark_to_ir`, the parsed definitions to IR (names checked, embedded
  grammars renamed, ``%ignore`` placed, the root rule named);
- ``_lazy``: lazy, ``suffix`` and ``stop`` rules and the dynamic tool-call dispatch;
- ``_parse``: the recursive-descent parser (definitions, attributes, directives,
  expressions) over ``_scan``, the scanner of the text (literals, regexes, counts, JSON);
- ``_exprs``: renaming and ``%ignore`` rewriting of IR expressions;
- ``_syntax``: what the others share: the parsed forms, the ``common`` terminals and the
  ``%ignore`` placeholder.
"""

from treegram.frontends.lark._lower import lark_to_ir

__all__ = ["lark_to_ir"]
