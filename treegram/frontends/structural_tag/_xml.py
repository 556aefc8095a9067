"""The entry of the XML argument styles of ``JSONSchemaFormat``: checks the style and the
excluded strings, and picks the converter (:mod:`._xml_arguments`;
:mod:`._xml_cohere` for ``cohere_xml``, :mod:`._xml_minimax_m3` for
``minimax_m3_xml``)."""

from __future__ import annotations

from typing import Any

from treegram.errors import InvalidStructuralTagError
from treegram.frontends.structural_tag._xml_arguments import (
    XML_STYLES,
    Converter,
    XmlBuilder,
)
from treegram.frontends.structural_tag._xml_cohere import CohereConverter
from treegram.frontends.structural_tag._xml_minimax_m3 import MiniMaxM3Converter
from treegram.ir import Expr

__all__ = ["xml_arguments_expr", "XML_STYLES"]


def xml_arguments_expr(
    b: XmlBuilder,
    schema: Any,
    style: str,
    *,
    max_whitespace_cnt: int | None,
    any_order: bool,
    path: str,
    excludes: list[str] | None = None,
    strict_mode: bool = True,
) -> Expr:
    """The expression of tool-call arguments valid against ``schema``, written in ``style``.

    ``excludes``: strings that may not occur in raw string values (those without
    ``pattern``/``format``; a length bound is dropped for them, as xgrammar does), in
    parameter names (declared names holding one are left out) nor in the strings of JSON
    values (as JSON Schema ``excludes``: written content, escapes included, length bounds
    kept exact); constant alternatives holding one are left out, and a value or argument
    object with none left admits no text.
    ``strict_mode=False``: absent ``additionalProperties`` and array ``items`` allow more
    (structural tags are always strict).

    Raises
    ------
    UnsupportedStructuralTagError
        A schema construct that is not compiled (the message names it).
    InvalidStructuralTagError
        ``style`` is not one of xgrammar's; an excluded string is empty, starts or ends
        with whitespace, or given with ``cohere_xml`` / ``minimax_m3_xml``; a schema that
        xgrammar refuses for the style (``minimax_m3_xml``: unconstrained values, open
        objects, constrained strings).
    """
    if style not in XML_STYLES:
        known = ["json", *XML_STYLES]
        raise InvalidStructuralTagError(f"{path}.style must be one of {known}, got {style!r}")
    banned = sorted(set(excludes or []))
    for text in banned:
        if not text or text[0] in " \t\r\n" or text[-1] in " \t\r\n":
            raise InvalidStructuralTagError(
                f"{path}.excludes: XML styles need non-empty strings that must not start or end "
                f"with formatting whitespace, got {text!r}"
            )
    if style in ("cohere_xml", "minimax_m3_xml") and banned:
        raise InvalidStructuralTagError(
            f"{path}.excludes is not supported for {style}: it must be empty, got {banned!r}"
        )
    kind = {"cohere_xml": CohereConverter, "minimax_m3_xml": MiniMaxM3Converter}.get(
        style, Converter
    )
    conv = kind(b, schema, XML_STYLES[style], max_whitespace_cnt, any_order, path)
    conv.excludes = banned
    conv.strict = strict_mode
    return conv.root()
