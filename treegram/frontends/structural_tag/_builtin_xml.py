"""Built-in structural tags of the models whose tool calls carry XML arguments.

Each builder takes the normalized options of :mod:`._builtin` (tools, tool
choice, reasoning mode...) and returns the same structural tag, field for field, as
xgrammar 0.2.8's function for the model; the arguments are a :class:`JSONSchemaFormat`
with the model's XML ``style`` (:mod:`._xml` compiles them).

Model keys: ``qwen_3_5`` / ``qwen_3_coder`` (``<tool_call>\\n<function=f>\\n``...),
``mimo`` (the same without the newlines), ``deepseek_v3_2``, ``deepseek_v4`` and
``deepseek_v4_1`` (DSML ``invoke`` blocks), ``minimax`` (``<minimax:tool_call>``),
``glm_4_7`` (``<tool_call>f<arg_key>...``), ``kimi_k3`` (``<|open|>call ...``; its
arguments exclude the special markers, refused where an argument's JSON value could hold a
string) and ``cohere`` (``<cofl:tool_calls><cofl:tool_call id="N" name="f">``, arguments
as ``<cofl:value>`` elements).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from treegram.errors import ArgumentError
from treegram.frontends.structural_tag._formats import (
    AnyTextFormat,
    ConstStringFormat,
    Format,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    RegexFormat,
    SequenceFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)

__all__ = ["XML_MODEL_BUILDERS", "call_block", "triggered_calls"]

_THINK = ["<think>", "</think>"]


class _Options(Protocol):
    """The fields of ``_builtin._Options`` that the builders read."""

    tools: list[Any]
    builtins: list[Any]
    choice: str
    reasoning: str
    any_order: bool
    exclude_special_tokens: bool
    max_whitespace_cnt: int | None
    parallel: bool


def _schema(fn: Any) -> bool | dict[str, Any]:
    """A function's argument schema; absent or non-strict parameters allow any arguments."""
    if getattr(fn, "strict", None) is False or fn.parameters is None:
        return True
    return fn.parameters


def _args(o: _Options, fn: Any, style: str, excludes: list[str] | None = None) -> JSONSchemaFormat:
    return JSONSchemaFormat(
        json_schema=_schema(fn),
        style=style,
        any_order=o.any_order,
        max_whitespace_cnt=o.max_whitespace_cnt,
        excludes=list(excludes or []),
    )


def _banned(o: _Options, tokens: list[str]) -> list[str]:
    return list(tokens) if o.exclude_special_tokens else []


def _reasoning(
    o: _Options,
    *,
    begin: str = "<think>",
    end: str = "</think>",
    excludes: list[str] = _THINK,
    prompt_opens: bool = True,
    suffix: str = "",
) -> Format | None:
    """The leading reasoning block: continued from the prompt when enabled (if the prompt
    opens it), optional when ``auto``, absent when disabled."""
    if o.reasoning == "disabled":
        return None
    opener = "" if o.reasoning == "enabled" and prompt_opens else begin
    block: Format = TagFormat(
        begin=opener, content=AnyTextFormat(excludes=_banned(o, excludes)), end=end
    )
    if suffix:
        block = SequenceFormat(elements=[block, ConstStringFormat(value=suffix)])
    return OptionalFormat(content=block) if o.reasoning == "auto" else block


def _assemble(prefix: Format | None, body: Format) -> StructuralTag:
    return StructuralTag(format=body if prefix is None else SequenceFormat([prefix, body]))


def _need_tools(o: _Options) -> None:
    if o.choice == "forced" and not o.tools:
        raise ArgumentError("a forced tool_choice must resolve to exactly one function tool")
    if o.choice == "required" and not o.tools:
        raise ArgumentError("tool_choice='required' needs at least one function tool")


def _calls(o: _Options, begin: Callable[[str], str], end: str, style: str) -> list[TagFormat]:
    return [
        TagFormat(begin=begin(t.function.name), content=_args(o, t.function, style), end=end)
        for t in o.tools
    ]


def triggered_calls(
    o: _Options,
    trigger: str,
    tags: list[TagFormat],
    *,
    excludes: list[str],
    text_excludes: list[str],
    forced: Format | None = None,
) -> Format:
    """Calls that ``trigger`` starts in free text without ``excludes``: the tags (at least
    one when required), the forced call alone (default: the first tag), or free text
    without ``text_excludes`` when there are no tools."""
    if o.choice == "forced":
        return tags[0] if forced is None else forced
    if not tags:
        return AnyTextFormat(excludes=text_excludes)
    return TriggeredTagsFormat(
        triggers=[trigger],
        tags=tags,
        excludes=excludes,
        at_least_one=o.choice == "required",
        stop_after_first=not o.parallel,
    )


def call_block(
    o: _Options,
    tags: list[TagFormat],
    *,
    trigger: str,
    begin: str,
    end: str,
    opening: str,
    excludes: list[str],
    text_excludes: list[str],
) -> Format:
    """Calls inside one ``begin ... end`` block: written out after ``opening`` when forced
    (the one call) or required (one or more), else a block that ``trigger`` starts in free
    text without ``excludes``; free text without ``text_excludes`` when there are no tools."""
    if o.choice == "forced":
        return _written_block(opening, tags[0], end)
    if not tags:
        return AnyTextFormat(excludes=text_excludes)
    calls = TagsWithSeparatorFormat(
        tags=tags, separator="", at_least_one=True, stop_after_first=not o.parallel
    )
    if o.choice == "required":
        return _written_block(opening, calls, end)
    return TriggeredTagsFormat(
        triggers=[trigger],
        tags=[TagFormat(begin=begin, content=calls, end=end)],
        excludes=excludes,
        stop_after_first=not o.parallel,
    )


def _written_block(opening: str, content: Format, end: str) -> SequenceFormat:
    return SequenceFormat(
        elements=[ConstStringFormat(value=opening), content, ConstStringFormat(value=end)]
    )


# ----------------------------------------------------------------------------- Qwen, MiMo
def _qwen_3_5(o: _Options) -> StructuralTag:
    # <tool_call>\n<function=f>\n<parameter=k>v</parameter>...\n</function>\n</tool_call>
    _need_tools(o)
    trigger = "<tool_call>\n<function="
    tags = _calls(o, lambda n: f"{trigger}{n}>\n", "\n</function>\n</tool_call>", "qwen_xml")
    excludes = _banned(o, _THINK)
    body = triggered_calls(o, trigger, tags, excludes=excludes, text_excludes=excludes)
    return _assemble(_reasoning(o, suffix="\n\n"), body)


def _mimo(o: _Options) -> StructuralTag:
    # <tool_call><function=f><parameter=k>v</parameter></function></tool_call>
    if o.builtins:
        raise ArgumentError("MiMo does not support builtin tools")
    _need_tools(o)
    start = "<tool_call>"
    text_excludes = [*_THINK, "</tool_call>", "<function="]
    reasoning_excludes = [start, *text_excludes]
    tags = _calls(o, lambda n: f"{start}<function={n}>", "</function></tool_call>", "qwen_xml")
    body = triggered_calls(
        o,
        start,
        tags,
        excludes=_banned(o, text_excludes),
        text_excludes=_banned(o, reasoning_excludes),
    )
    prefix = _reasoning(o, excludes=reasoning_excludes, prompt_opens=False)
    return _assemble(prefix, body)


# ----------------------------------------------------------------------------- DeepSeek
def _dsml(o: _Options, *, invoke: str, calls: str, style: str, v4_1: bool = False) -> Format:
    """DeepSeek's DSML calls: a ``calls`` block of ``invoke`` tags."""
    _need_tools(o)
    begin_block = f"<\uff5cDSML\uff5c{calls}>\n"
    end_block = f"</\uff5cDSML\uff5c{calls}>"
    tags = _calls(
        o,
        lambda n: f'<\uff5cDSML\uff5c{invoke} name="{n}">\n',
        f"</\uff5cDSML\uff5c{invoke}>\n",
        style,
    )
    trigger = f"<\uff5cDSML\uff5c{calls}>"
    # without tools, a calls block may not slip through as text (V4.1)
    text_excludes = [*_banned(o, _THINK), *([trigger] if v4_1 else [])]
    return call_block(
        o,
        tags,
        trigger=trigger,
        begin=begin_block,
        end=end_block,
        opening="\n\n" + begin_block,
        excludes=_banned(o, _THINK),
        text_excludes=text_excludes,
    )


def _deepseek_v3_2(o: _Options) -> StructuralTag:
    body = _dsml(o, invoke="invoke", calls="function_calls", style="deepseek_xml")
    return _assemble(_reasoning(o), body)


def _deepseek_v4(o: _Options) -> StructuralTag:
    body = _dsml(o, invoke="invoke", calls="tool_calls", style="deepseek_xml")
    return _assemble(_reasoning(o), body)


def _deepseek_v4_1(o: _Options) -> StructuralTag:
    body = _dsml(o, invoke=" invoke", calls=" calls", style="deepseek_v4_1_xml", v4_1=True)
    return _assemble(_reasoning(o), body)


# ----------------------------------------------------------------------------- MiniMax
def _minimax(o: _Options) -> StructuralTag:
    # <minimax:tool_call>\n<invoke name="f">\n<parameter name="k">v</parameter></invoke>\n...
    _need_tools(o)
    begin_block, end_block = "<minimax:tool_call>\n", "</minimax:tool_call>"
    tags = _calls(o, lambda n: f'<invoke name="{n}">\n', "</invoke>\n", "minimax_xml")
    body = call_block(
        o,
        tags,
        trigger="<minimax:tool_call>",
        begin=begin_block,
        end=end_block,
        opening="\n" + begin_block,
        excludes=_banned(o, _THINK),
        text_excludes=_banned(o, _THINK),
    )
    if o.reasoning == "disabled":  # an empty reasoning block is written out
        return StructuralTag(
            format=SequenceFormat(
                elements=[
                    ConstStringFormat(value="\n</think>\n\n"),
                    ConstStringFormat(value="\n\n"),
                    body,
                ]
            )
        )
    excludes = [] if o.reasoning == "enabled" else _THINK
    return _assemble(_reasoning(o, excludes=excludes, suffix="\n\n"), body)


# ----------------------------------------------------------------------------- GLM
def _glm_4_7(o: _Options) -> StructuralTag:
    # <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>
    _need_tools(o)
    arg_tokens = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
    reasoning_excludes = [*_THINK, "<tool_call>", "</tool_call>", *arg_tokens]
    text_excludes = [*_THINK, "</tool_call>", *arg_tokens]
    tags = _calls(o, lambda n: f"<tool_call>{n}", "</tool_call>", "glm_xml")
    body = triggered_calls(
        o,
        "<tool_call>",
        tags,
        excludes=_banned(o, text_excludes),
        text_excludes=_banned(o, reasoning_excludes),
    )
    return _assemble(_reasoning(o, excludes=reasoning_excludes), body)


# ----------------------------------------------------------------------------- Kimi-K3
def _kimi_k3(o: _Options) -> StructuralTag:
    # [think body]<|close|>think<|sep|><|open|>response<|sep|>...<|close|>response<|sep|>
    # [<|open|>tools<|sep|><|open|>call tool="f" index="N"<|sep|>args<|close|>call<|sep|>...
    # <|close|>tools<|sep|>]<|close|>message<|sep|>
    _need_tools(o)
    op, cl, sep = "<|open|>", "<|close|>", "<|sep|>"
    specials = [op, cl]

    def call(fn: Any) -> TagFormat:
        return TagFormat(
            begin=f'{op}call tool="{fn.name}" index="',
            content=SequenceFormat(
                elements=[
                    RegexFormat(pattern=r"\d+"),
                    ConstStringFormat(value=f'"{sep}'),
                    _args(o, fn, "kimi_k3_xml", _banned(o, [op, cl, sep])),
                ]
            ),
            end=f"{cl}call{sep}",
        )

    tags = [call(t.function) for t in o.tools]
    tools_part: Format | None = None
    if o.choice == "forced":
        tools_part = SequenceFormat(
            elements=[
                ConstStringFormat(value=f"{op}tools{sep}"),
                tags[0],
                ConstStringFormat(value=f"{cl}tools{sep}"),
            ]
        )
    elif tags:
        calls = TagsWithSeparatorFormat(
            tags=tags, separator="", at_least_one=True, stop_after_first=not o.parallel
        )
        if o.choice == "required":
            tools_part = SequenceFormat(
                elements=[
                    ConstStringFormat(value=f"{op}tools{sep}"),
                    calls,
                    ConstStringFormat(value=f"{cl}tools{sep}"),
                ]
            )
        else:
            tools_part = OptionalFormat(
                content=TagFormat(begin=f"{op}tools{sep}", content=calls, end=f"{cl}tools{sep}")
            )
    elements: list[Format] = []
    prefix = _reasoning(o, begin=f"{op}think{sep}", end=f"{cl}think{sep}", excludes=specials)
    if prefix is not None:
        elements.append(prefix)
    elements.append(
        TagFormat(
            begin="" if o.reasoning == "disabled" else f"{op}response{sep}",
            content=AnyTextFormat(excludes=_banned(o, specials)),
            end=f"{cl}response{sep}",
        )
    )
    if tools_part is not None:
        elements.append(tools_part)
    elements.append(ConstStringFormat(value=f"{cl}message{sep}"))
    return StructuralTag(format=SequenceFormat(elements=elements))


# ----------------------------------------------------------------------------- Cohere
def _cohere(o: _Options) -> StructuralTag:
    # <cofl:tool_calls><cofl:tool_call id="N" name="f">args</cofl:tool_call>...
    # </cofl:tool_calls>
    _need_tools(o)
    think = ["<|START_THINKING|>", "<|END_THINKING|>"]
    begin_block, end_block = "<cofl:tool_calls>", "</cofl:tool_calls>"

    def call(fn: Any) -> TagFormat:
        return TagFormat(
            begin='<cofl:tool_call id="',
            content=SequenceFormat(
                elements=[
                    RegexFormat(pattern=r"\d+"),
                    ConstStringFormat(value=f'" name="{fn.name}">'),
                    _args(o, fn, "cohere_xml"),
                ]
            ),
            end="</cofl:tool_call>",
        )

    tags = [call(t.function) for t in o.tools]
    body = call_block(
        o,
        tags,
        trigger=begin_block,
        begin=begin_block,
        end=end_block,
        opening=begin_block,
        excludes=_banned(o, think),
        text_excludes=_banned(o, think),
    )
    excludes = [] if o.reasoning == "enabled" else think
    prefix = _reasoning(o, begin=think[0], end=think[1], excludes=excludes)
    return _assemble(prefix, body)


# ----------------------------------------------------------------------------- MiniMax-M3
_M3 = "]<]minimax[>["


def _minimax_m3(o: _Options) -> StructuralTag:
    # NS<tool_call>\nNS<invoke name="f">args NS</invoke>\n ... NS</tool_call>, NS the
    # namespace marker; reasoning in <mm:think>...</mm:think>
    if o.builtins:
        raise ArgumentError("MiniMax M3 does not support builtin tools")
    _need_tools(o)
    think = ["<mm:think>", "</mm:think>"]
    trigger, block_end = f"{_M3}<tool_call>", f"{_M3}</tool_call>"
    # the bare marker is not excluded: every element and the trigger share it
    stray = [block_end, f"{_M3}<invoke", f"{_M3}</invoke>"]
    suffix_excludes = [*think, *stray]
    reasoning_excludes = [trigger, *suffix_excludes]
    invokes = _calls(
        o, lambda n: f'{_M3}<invoke name="{n}">', f"{_M3}</invoke>\n", "minimax_m3_xml"
    )

    def block(tags: list[TagFormat], many: bool = True) -> TagFormat:
        content: Format = (
            TagsWithSeparatorFormat(
                tags=tags, separator="", at_least_one=True, stop_after_first=not o.parallel
            )
            if many
            else tags[0]
        )
        return TagFormat(begin=f"{trigger}\n", content=content, end=block_end)

    body = triggered_calls(
        o,
        trigger,
        [block(invokes)] if invokes else [],
        excludes=_banned(o, suffix_excludes),
        text_excludes=_banned(o, [trigger, *suffix_excludes]),
        forced=block(invokes[:1], many=False) if o.choice == "forced" else None,
    )
    prefix = _reasoning(o, begin=think[0], end=think[1], excludes=reasoning_excludes)
    if isinstance(prefix, OptionalFormat):  # skipping reasoning may write a lone closing marker
        prefix.content = OrFormat(elements=[prefix.content, ConstStringFormat(value=think[1])])
    return _assemble(prefix, body)


XML_MODEL_BUILDERS: dict[str, Callable[[Any], StructuralTag]] = {
    "qwen_3_5": _qwen_3_5,
    "qwen_3_coder": _qwen_3_5,
    "mimo": _mimo,
    "kimi_k3": _kimi_k3,
    "deepseek_v3_2": _deepseek_v3_2,
    "deepseek_v4": _deepseek_v4,
    "deepseek_v4_1": _deepseek_v4_1,
    "minimax": _minimax,
    "glm_4_7": _glm_4_7,
    "cohere": _cohere,
    "minimax_m3": _minimax_m3,
}
