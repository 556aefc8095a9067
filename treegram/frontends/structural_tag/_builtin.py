"""Built-in structural tags for models' tool-call formats (xgrammar 0.2.8's
``get_model_structural_tag``), and the OpenAI Chat Completions tool shapes they take.

A builder turns the available tools, the tool choice and the reasoning mode into a
:class:`StructuralTag` that allows exactly the model's output syntax: an optional reasoning
block, then free text in which the model's tool-call marker starts a call whose arguments
follow the tool's JSON Schema (``tool_choice="auto"``), at least one call (``"required"``),
or exactly the one forced call. The structural tags are the same, field for field, as
xgrammar's for the same arguments (tests/frontends/structural_tag/test_builtin.py).

Model keys: ``llama`` (Llama 3.x JSON calls), ``qwen_3`` (Qwen3 ``<tool_call>``),
``exaone`` (EXAONE 4.0), ``kimi`` (Kimi-K2), ``deepseek_r1`` and ``deepseek_v3_1``
(DeepSeek's tool-call special tokens) and ``harmony`` (OpenAI gpt-oss); the models whose
calls carry XML arguments (``qwen_3_coder``/``qwen_3_5``, ``mimo``, ``minimax``,
``glm_4_7``, ``kimi_k3``, ``deepseek_v3_2``, ``deepseek_v4``/``deepseek_v4_1``, ``cohere``,
``minimax_m3``) are built in :mod:`._builtin_xml`.
Each model also has xgrammar's per-model function (``get_llama_structural_tag``...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from treegram.errors import ArgumentError
from treegram.frontends.structural_tag._builtin_xml import (
    XML_MODEL_BUILDERS,
    call_block,
    triggered_calls,
)
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


# ----------------------------------------------------------------------------- tools
@dataclass
class FunctionDefinition:
    """A function the model may call: its ``name`` and the JSON Schema of its arguments
    (``parameters``; None or ``strict=False`` leaves the arguments any JSON value)."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


@dataclass
class FunctionToolParam:
    """A function tool in the Chat Completions shape:
    ``{"type": "function", "function": {"name": ..., "parameters": ...}}``."""

    function: FunctionDefinition
    type: str = "function"


@dataclass
class BuiltinToolParam:
    """A provider builtin tool (``type``, such as ``"web_search_preview"``); ``name`` is the
    name the model writes (default ``type``), ``parameters`` the arguments' schema."""

    type: str
    name: str | None = None
    parameters: dict[str, Any] | None = None


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json")
    if isinstance(value, (FunctionToolParam, BuiltinToolParam, FunctionDefinition)):
        return {k: _plain(v) for k, v in vars(value).items()}
    return value


def _opt_str(obj: dict, key: str, path: str) -> str | None:
    v = obj.get(key)
    if v is not None and not isinstance(v, str):
        raise ArgumentError(f"{path}.{key} must be a string, got {type(v).__name__}")
    return v


def _schema(obj: dict, path: str) -> dict[str, Any] | None:
    v = obj.get("parameters")
    if v is not None and not isinstance(v, dict):
        raise ArgumentError(f"{path}.parameters must be a JSON Schema object or None")
    return v


def _tool(value: Any, path: str) -> FunctionToolParam | BuiltinToolParam:
    obj = _plain(value)
    if not isinstance(obj, dict):
        raise ArgumentError(f"{path} must be a tool object, got {type(obj).__name__}")
    kind = obj.get("type", "function")  # a function tool when left out, as in xgrammar
    if not isinstance(kind, str):
        raise ArgumentError(f"{path}.type must be a string")
    if kind != "function":
        return BuiltinToolParam(
            type=kind, name=_opt_str(obj, "name", path), parameters=_schema(obj, path)
        )
    fn = obj.get("function")
    if not isinstance(fn, dict):
        raise ArgumentError(f"{path}.function must be an object with a name")
    name = _opt_str(fn, "name", f"{path}.function")
    if name is None:
        raise ArgumentError(f"{path}.function.name is required")
    strict = fn.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ArgumentError(f"{path}.function.strict must be a boolean or None")
    return FunctionToolParam(
        function=FunctionDefinition(
            name=name,
            description=_opt_str(fn, "description", f"{path}.function"),
            parameters=_schema(fn, f"{path}.function"),
            strict=strict,
        )
    )


def _choice_name(obj: dict, path: str) -> str:
    fn = obj.get("function")
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise ArgumentError(f"{path}.function.name must be a string")
    return name


def normalize_tool_choice(
    tools: list | None = None, tool_choice: Any = "auto"
) -> tuple[list[FunctionToolParam], list[BuiltinToolParam], str]:
    """Split ``tools`` into function and builtin tools, keep those ``tool_choice`` allows,
    and reduce it to ``"auto"``, ``"required"`` or ``"forced"`` (xgrammar's semantics).

    Parameters
    ----------
    tools : list of dict or tool objects, optional
        Chat Completions function tools and builtin tools (None: none).
    tool_choice : str or dict, default "auto"
        ``"auto"`` (or None), ``"none"`` (no tools), ``"required"``, ``{"type":
        "function", "function": {"name": ...}}``, ``{"type": <builtin type>}`` or
        ``{"type": "allowed_tools", "allowed_tools": {"mode": ..., "tools": [...]}}``.

    Returns
    -------
    (list of FunctionToolParam, list of BuiltinToolParam, str)

    Raises
    ------
    ArgumentError
        Malformed tools or tool choice, a named tool that is missing, ``"required"``
        without tools, or a forced choice that does not name exactly one tool.
    """
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise ArgumentError(f"tools must be a list, got {type(tools).__name__}")
    parsed = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    functions = [t for t in parsed if isinstance(t, FunctionToolParam)]
    builtins = [t for t in parsed if isinstance(t, BuiltinToolParam)]
    choice = "auto" if tool_choice is None else _plain(tool_choice)
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise ArgumentError(
                f"tool_choice must be 'auto', 'none', 'required' or an object, got {choice!r}"
            )
        if choice == "none":
            functions, builtins, choice = [], [], "auto"
        simple = choice
    elif isinstance(choice, dict) and isinstance(choice.get("type"), str):
        kind = choice["type"]
        if kind == "allowed_tools":
            functions, builtins, simple = _allowed(functions, builtins, choice)
        elif kind == "function":
            name = _choice_name(choice, "tool_choice")
            functions = [t for t in functions if t.function.name == name]
            if not functions:
                raise ArgumentError(f"tool_choice names function {name!r}, not in tools")
            builtins, simple = [], "forced"
        else:
            builtins = [t for t in builtins if t.type == kind]
            if len(builtins) != 1:
                raise ArgumentError(
                    f"tool_choice type {kind!r} must match exactly one builtin tool, "
                    f"got {len(builtins)}"
                )
            functions, simple = [], "forced"
    else:
        raise ArgumentError(
            "tool_choice must be 'auto', 'none', 'required', None or an object with a type"
        )
    if simple == "required" and not functions and not builtins:
        raise ArgumentError("tool_choice='required' needs at least one tool")
    if simple == "forced" and len(functions) + len(builtins) != 1:
        raise ArgumentError("a forced tool_choice must resolve to exactly one tool")
    return functions, builtins, simple


def _allowed(
    functions: list[FunctionToolParam], builtins: list[BuiltinToolParam], choice: dict
) -> tuple[list[FunctionToolParam], list[BuiltinToolParam], str]:
    spec = choice.get("allowed_tools")
    if not isinstance(spec, dict) or spec.get("mode") not in ("auto", "required"):
        raise ArgumentError(
            "tool_choice.allowed_tools must be an object with mode 'auto' or 'required'"
        )
    refs = spec.get("tools")
    if not isinstance(refs, list):
        raise ArgumentError("tool_choice.allowed_tools.tools must be a list")
    names: set[str] = set()
    kinds: set[str] = set()
    for i, ref in enumerate(refs):
        path = f"tool_choice.allowed_tools.tools[{i}]"
        if not isinstance(ref, dict) or not isinstance(ref.get("type"), str):
            raise ArgumentError(f"{path} must be an object with a type")
        if ref["type"] == "function":
            names.add(_choice_name(ref, path))
        else:
            kinds.add(ref["type"])
    missing = names - {t.function.name for t in functions}
    if missing:
        raise ArgumentError(f"allowed function tools are not in tools: {sorted(missing)}")
    builtins = [t for t in builtins if t.type in kinds]
    missing = kinds - {t.type for t in builtins}
    if missing:
        raise ArgumentError(f"allowed builtin tools are not in tools: {sorted(missing)}")
    return [t for t in functions if t.function.name in names], builtins, spec["mode"]


# ----------------------------------------------------------------------------- builders
@dataclass
class _Options:
    tools: list[FunctionToolParam]
    builtins: list[BuiltinToolParam]
    choice: str
    reasoning: str
    any_order: bool
    exclude_special_tokens: bool
    max_whitespace_cnt: int | None
    parallel: bool
    think_excludes: list[str] = field(default_factory=lambda: ["<think>", "</think>"])

    def args(self, tool: FunctionDefinition | BuiltinToolParam) -> JSONSchemaFormat:
        """The arguments of a call: the tool's schema, or any JSON value."""
        schema: bool | dict[str, Any] = True
        if tool.parameters is not None and getattr(tool, "strict", None) is not False:
            schema = tool.parameters
        return JSONSchemaFormat(
            json_schema=schema, any_order=self.any_order, max_whitespace_cnt=self.max_whitespace_cnt
        )

    def need_function(self) -> None:
        """Formats without builtin tools cannot force or require only builtin ones."""
        if self.choice in ("forced", "required") and not self.tools:
            raise ArgumentError(
                f"tool_choice={self.choice!r} needs a function tool: this model's format "
                "has no builtin tools"
            )

    def excludes(self) -> list[str]:
        return list(self.think_excludes) if self.exclude_special_tokens else []

    def reasoning_prefix(
        self, suffix: str = "", *, excludes: list[str] | None = None
    ) -> Format | None:
        """The leading ``<think>...</think>`` block: continued from the prompt when
        enabled, optional when ``auto``, absent when disabled. ``excludes``: the strings
        its text may not contain when ``exclude_special_tokens`` (default: the markers)."""
        if self.reasoning == "disabled":
            return None
        begin = "" if self.reasoning == "enabled" else "<think>"
        banned = self.think_excludes if excludes is None else excludes
        text = AnyTextFormat(excludes=list(banned) if self.exclude_special_tokens else [])
        block: Format = TagFormat(begin=begin, content=text, end="</think>")
        if suffix:
            block = SequenceFormat(elements=[block, ConstStringFormat(value=suffix)])
        return OptionalFormat(content=block) if self.reasoning == "auto" else block


_Builder = Callable[[_Options], StructuralTag]
# model key -> (builder, whether it is one of ours taking _Options, or a user's function
# with xgrammar's calling convention)
_REGISTRY: dict[str, tuple[Callable[..., StructuralTag], bool]] = {}


def _builtin(name: str) -> Callable[[_Builder], _Builder]:
    def decorator(fn: _Builder) -> _Builder:
        _REGISTRY[name] = (fn, True)
        return fn

    return decorator


def register_model_structural_tag(name: str) -> Callable[[Callable], Callable]:
    """Register a structural tag builder under the model key ``name`` (a decorator), with
    xgrammar's calling convention.

    The builder is called as ``fn(tools, builtin_tools, tool_choice, reasoning, *,
    any_order, exclude_special_tokens, max_whitespace_cnt, parallel_tool_calls)`` with the
    normalized function tools (:class:`FunctionToolParam`), builtin tools
    (:class:`BuiltinToolParam`), ``tool_choice`` in ``{"auto", "required", "forced"}`` and
    ``reasoning`` in ``{"enabled", "disabled", "auto"}``; it returns a
    :class:`StructuralTag`. A key registered again replaces the earlier builder.

    Raises
    ------
    ArgumentError
        ``name`` is not a non-empty string.
    """
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"name must be a non-empty string, got {name!r}")

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise ArgumentError(f"the builder registered as {name!r} must be callable")
        _REGISTRY[name] = (fn, False)
        return fn

    return decorator


def builtin_structural_tag_models() -> list[str]:
    """The registered model keys."""
    return list(_REGISTRY)


def _with_prefix(prefix: Format | None, body: Format) -> StructuralTag:
    return StructuralTag(format=body if prefix is None else SequenceFormat([prefix, body]))


def _json_calls(o: _Options, begin: Callable[[str], str], end: str, trigger: str) -> Format:
    """Calls written as one tag each, found by ``trigger`` in free text (Llama, Qwen3)."""
    o.need_function()
    tags = [
        TagFormat(begin=begin(t.function.name), content=o.args(t.function), end=end)
        for t in o.tools
    ]
    return triggered_calls(o, trigger, tags, excludes=o.excludes(), text_excludes=o.excludes())


@_builtin("llama")
def _llama(o: _Options) -> StructuralTag:
    # Llama 3.x: {"name": "f", "parameters": {...}}; no reasoning block.
    body = _json_calls(o, lambda n: '{"name": "' + n + '", "parameters": ', "}", '{"name": ')
    return StructuralTag(format=body)


@_builtin("qwen_3")
def _qwen_3(o: _Options) -> StructuralTag:
    # Qwen3: <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
    body = _json_calls(
        o,
        lambda n: '<tool_call>\n{"name": "' + n + '", "arguments": ',
        "}\n</tool_call>",
        "<tool_call>",
    )
    return _with_prefix(o.reasoning_prefix("\n\n"), body)


_DS_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
_DS_CALLS_END = "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN = "<｜tool▁call▁begin｜>"
_DS_CALL_END = "<｜tool▁call▁end｜>"
_DS_SEP = "<｜tool▁sep｜>"


def _deepseek(o: _Options, begin: Callable[[str], str], end: str, separator: str) -> Format:
    """DeepSeek: calls inside one ``tool calls`` block opened by its special token."""
    o.need_function()
    if o.choice == "forced":
        fn = o.tools[0].function
        return TagFormat(
            begin=_DS_CALLS_BEGIN + begin(fn.name), content=o.args(fn), end=end + _DS_CALLS_END
        )
    tags = [
        TagFormat(begin=begin(t.function.name), content=o.args(t.function), end=end)
        for t in o.tools
    ]
    if not tags:
        return AnyTextFormat(excludes=o.excludes())
    block = TagFormat(
        begin=_DS_CALLS_BEGIN,
        content=TagsWithSeparatorFormat(
            tags=tags, separator=separator, at_least_one=True, stop_after_first=not o.parallel
        ),
        end=_DS_CALLS_END,
    )
    if o.choice == "required":
        return block
    return TriggeredTagsFormat(
        triggers=[_DS_CALLS_BEGIN],
        tags=[block],
        excludes=o.excludes(),
        stop_after_first=not o.parallel,
    )


@_builtin("deepseek_r1")
def _deepseek_r1(o: _Options) -> StructuralTag:
    body = _deepseek(
        o,
        lambda n: f"{_DS_CALL_BEGIN}function{_DS_SEP}{n}\n```json\n",
        f"\n```{_DS_CALL_END}",
        "\n",
    )
    return _with_prefix(o.reasoning_prefix(), body)


@_builtin("deepseek_v3_1")
def _deepseek_v3_1(o: _Options) -> StructuralTag:
    body = _deepseek(o, lambda n: f"{_DS_CALL_BEGIN}{n}{_DS_SEP}", _DS_CALL_END, "")
    return _with_prefix(o.reasoning_prefix(), body)


@_builtin("exaone")
def _exaone(o: _Options) -> StructuralTag:
    # EXAONE 4.0: <tool_call>{"name": "f", "arguments": {...}}</tool_call>
    body = _json_calls(
        o,
        lambda n: '<tool_call>{"name": "' + n + '", "arguments": ',
        "}</tool_call>",
        "<tool_call>",
    )
    # the prompt opens the block when reasoning is enabled; markers are banned otherwise
    banned = [] if o.reasoning == "enabled" else None
    return _with_prefix(o.reasoning_prefix("\n\n", excludes=banned), body)


_KIMI_SECTION_BEGIN = "<|tool_calls_section_begin|>"
_KIMI_SECTION_END = "<|tool_calls_section_end|>"
_KIMI_CALL_BEGIN = "<|tool_call_begin|>"


@_builtin("kimi")
def _kimi(o: _Options) -> StructuralTag:
    # Kimi-K2: a section of calls <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>
    # {...}<|tool_call_end|>
    o.need_function()

    def call(fn: FunctionDefinition) -> TagFormat:
        return TagFormat(
            begin=f"{_KIMI_CALL_BEGIN}functions.{fn.name}:",
            content=SequenceFormat(
                elements=[
                    RegexFormat(pattern=r"\d+"),
                    ConstStringFormat(value="<|tool_call_argument_begin|>"),
                    o.args(fn),
                ]
            ),
            end="<|tool_call_end|>",
        )

    body = call_block(
        o,
        [call(t.function) for t in o.tools],
        trigger=_KIMI_SECTION_BEGIN,
        begin=_KIMI_SECTION_BEGIN,
        end=_KIMI_SECTION_END,
        opening=_KIMI_SECTION_BEGIN,
        excludes=[*o.think_excludes, _KIMI_CALL_BEGIN] if o.exclude_special_tokens else [],
        text_excludes=o.excludes(),
    )
    # Kimi-K2 does not prefill <think>: the enabled block may contain the markers
    banned = None if o.reasoning == "auto" else []
    return _with_prefix(o.reasoning_prefix(excludes=banned), body)


_HARMONY_CALL_END = "<|call|>"
_HARMONY_MESSAGE_END = ["<|end|>", "<|return|>"]
_HARMONY_SEP = "<|start|>assistant"


@_builtin("harmony")
def _harmony(o: _Options) -> StructuralTag:
    # OpenAI Harmony (gpt-oss): messages on channels, separated by a new assistant start;
    # a call names its recipient before or after the channel.
    def function_calls(fn: FunctionDefinition) -> list[TagFormat]:
        heads = [
            f"<|channel|>commentary to=functions.{fn.name}<|constrain|>json<|message|>",
            f" to=functions.{fn.name}<|channel|>commentary <|constrain|>json<|message|>",
            f" to=functions.{fn.name}<|channel|>commentary json<|message|>",
        ]
        return [TagFormat(begin=h, content=o.args(fn), end=_HARMONY_CALL_END) for h in heads]

    def builtin_calls(tool: BuiltinToolParam) -> list[TagFormat]:
        name = tool.name or tool.type
        heads = [
            f"<|channel|>commentary to={name} code<|message|>",
            f" to={name}<|channel|>commentary code<|message|>",
        ]
        return [TagFormat(begin=h, content=o.args(tool), end=_HARMONY_CALL_END) for h in heads]

    tags: list[TagFormat] = []
    if o.choice == "auto":
        for t in o.tools:
            tags += function_calls(t.function)
        for b in o.builtins:
            tags += builtin_calls(b)
        tags.append(
            TagFormat(
                begin="<|channel|>final<|message|>",
                content=AnyTextFormat(),
                end=list(_HARMONY_MESSAGE_END),
            )
        )
    elif o.choice == "forced":
        tags += builtin_calls(o.builtins[0]) if o.builtins else function_calls(o.tools[0].function)
    else:
        for b in o.builtins:
            tags += builtin_calls(b)
        for t in o.tools:
            tags += function_calls(t.function)
    if o.reasoning != "disabled":
        tags.append(
            TagFormat(
                begin="<|channel|>analysis<|message|>",
                content=AnyTextFormat(),
                end=list(_HARMONY_MESSAGE_END),
            )
        )
    calls = [t for t in tags if t.end == _HARMONY_CALL_END]
    messages = [t for t in tags if t.end != _HARMONY_CALL_END]
    if o.parallel or not calls:
        return StructuralTag(format=TagsWithSeparatorFormat(tags=tags, separator=_HARMONY_SEP))
    # One call at most, and it ends the turn; other messages may come before it.
    one_call = TagsWithSeparatorFormat(
        tags=calls, separator=_HARMONY_SEP, at_least_one=True, stop_after_first=True
    )
    if not messages:
        return StructuralTag(format=OptionalFormat(content=one_call))
    return StructuralTag(
        format=OrFormat(
            elements=[
                TagsWithSeparatorFormat(tags=messages, separator=_HARMONY_SEP),
                one_call,
                SequenceFormat(
                    elements=[
                        TagsWithSeparatorFormat(
                            tags=messages, separator=_HARMONY_SEP, at_least_one=True
                        ),
                        ConstStringFormat(value=_HARMONY_SEP),
                        one_call,
                    ]
                ),
            ]
        )
    )


def get_model_structural_tag(
    model: str,
    tools: list | None = None,
    tool_choice: Any = "auto",
    reasoning: bool | str = "enabled",
    force_reasoning: bool = False,
    any_order: bool = False,
    exclude_special_tokens: bool = True,
    max_whitespace_cnt: int | None = None,
    parallel_tool_calls: bool = True,
) -> StructuralTag:
    """The structural tag of a model's reasoning and tool-call output (xgrammar's API).

    Parameters
    ----------
    model : str
        A model key: ``"llama"``, ``"qwen_3"``, ``"exaone"``, ``"kimi"``,
        ``"deepseek_r1"``, ``"deepseek_v3_1"``, ``"harmony"``, or one with XML arguments:
        ``"qwen_3_5"``, ``"qwen_3_coder"``, ``"mimo"``, ``"deepseek_v3_2"``,
        ``"deepseek_v4"``, ``"deepseek_v4_1"``, ``"minimax"``, ``"glm_4_7"``, ``"kimi_k3"``,
        ``"cohere"``, ``"minimax_m3"``
        (see :func:`builtin_structural_tag_models`).
    tools : list, optional
        OpenAI Chat Completions tools (``{"type": "function", "function": {...}}``) and
        builtin tools (``{"type": ..., "name": ..., "parameters": ...}``), as dicts, the
        dataclasses of this module, or pydantic models.
    tool_choice : str or dict, default "auto"
        See :func:`normalize_tool_choice`.
    reasoning : {"enabled", "disabled", "auto"} or bool, default "enabled"
        ``"enabled"`` continues a reasoning block the prompt opened; ``"auto"`` makes a
        whole block optional; ``"disabled"`` leaves it out (True/False: enabled/disabled).
    force_reasoning : bool
        Deprecated in xgrammar and ignored.
    any_order : bool, default False
        Passed to every arguments schema (``True`` is refused when compiled).
    exclude_special_tokens : bool, default True
        Forbid the model's reasoning markers inside free text.
    max_whitespace_cnt : int, optional
        Longest whitespace run inside arguments.
    parallel_tool_calls : bool, default True
        False allows at most one call, which ends the output.

    Returns
    -------
    StructuralTag

    Raises
    ------
    ArgumentError
        An unknown model, a bad option, or malformed tools / tool choice.
    """
    entry = _REGISTRY.get(model) if isinstance(model, str) else None
    if entry is None:
        raise ArgumentError(f"model must be one of {sorted(_REGISTRY)}, got {model!r}")
    functions, builtins, choice = normalize_tool_choice(tools, tool_choice)
    if isinstance(reasoning, bool):
        reasoning = "enabled" if reasoning else "disabled"
    if reasoning not in ("enabled", "disabled", "auto"):
        raise ArgumentError(
            f"reasoning must be 'enabled', 'disabled', 'auto' or a bool, got {reasoning!r}"
        )
    for name, flag in (
        ("parallel_tool_calls", parallel_tool_calls),
        ("any_order", any_order),
        ("exclude_special_tokens", exclude_special_tokens),
    ):
        if not isinstance(flag, bool):
            raise ArgumentError(f"{name} must be a bool, got {type(flag).__name__}")
    if max_whitespace_cnt is not None and (
        not isinstance(max_whitespace_cnt, int) or isinstance(max_whitespace_cnt, bool)
    ):
        raise ArgumentError("max_whitespace_cnt must be an int or None")
    builder, ours = entry
    if not ours:
        return builder(
            functions,
            builtins,
            choice,
            reasoning,
            any_order=any_order,
            exclude_special_tokens=exclude_special_tokens,
            max_whitespace_cnt=max_whitespace_cnt,
            parallel_tool_calls=parallel_tool_calls,
        )
    return builder(
        _Options(
            tools=functions,
            builtins=builtins,
            choice=choice,
            reasoning=reasoning,
            any_order=any_order,
            exclude_special_tokens=exclude_special_tokens,
            max_whitespace_cnt=max_whitespace_cnt,
            parallel=parallel_tool_calls,
        )
    )


get_builtin_structural_tag = get_model_structural_tag
"""Alias of :func:`get_model_structural_tag` (xgrammar's deprecated name)."""


# ----------------------------------------------------------------------------- per model
for _name, _build in XML_MODEL_BUILDERS.items():
    _REGISTRY[_name] = (_build, True)


def _tools_of(value: Any, name: str, kind: type) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ArgumentError(f"{name} must be a list or None, got {type(value).__name__}")
    out = [_tool(t, f"{name}[{i}]") for i, t in enumerate(value)]
    for i, t in enumerate(out):
        if not isinstance(t, kind):
            raise ArgumentError(f"{name}[{i}] must be a {kind.__name__}")
    return out


def _model_function(key: str, reasoning_default: str = "enabled") -> Callable[..., StructuralTag]:
    """xgrammar's per-model function for ``key``: tools already normalized (function and
    builtin tools apart, ``tool_choice`` one of ``"auto"``, ``"required"``, ``"forced"``)."""

    def get(
        tools: list | None = None,
        builtin_tools: list | None = None,
        tool_choice: str = "auto",
        reasoning: bool | str = reasoning_default,
        any_order: bool = False,
        exclude_special_tokens: bool = True,
        max_whitespace_cnt: int | None = None,
        parallel_tool_calls: bool = True,
        **kwargs: Any,
    ) -> StructuralTag:
        if tool_choice not in ("auto", "required", "forced"):
            raise ArgumentError(
                f"tool_choice must be 'auto', 'required' or 'forced', got {tool_choice!r}"
            )
        if isinstance(reasoning, bool):
            reasoning = "enabled" if reasoning else "disabled"
        if reasoning not in ("enabled", "disabled", "auto"):
            raise ArgumentError(
                f"reasoning must be 'enabled', 'disabled', 'auto' or a bool, got {reasoning!r}"
            )
        options = _Options(
            tools=_tools_of(tools, "tools", FunctionToolParam),
            builtins=_tools_of(builtin_tools, "builtin_tools", BuiltinToolParam),
            choice=tool_choice,
            reasoning=reasoning,
            any_order=any_order,
            exclude_special_tokens=exclude_special_tokens,
            max_whitespace_cnt=max_whitespace_cnt,
            parallel=parallel_tool_calls,
        )
        return _REGISTRY_OURS[key](options)

    get.__name__ = get.__qualname__ = f"get_{key}_structural_tag"
    get.__doc__ = (
        f"The structural tag of the ``{key!r}`` model's tool-call format (xgrammar's "
        "per-model function).\n\nTakes the tools as :func:`normalize_tool_choice` returns "
        "them; see :func:`get_model_structural_tag` for the options.\n"
    )
    return get


# The builders registered by treegram itself, kept apart from user registrations so the
# per-model functions always build treegram's format.
_REGISTRY_OURS: dict[str, _Builder] = {k: fn for k, (fn, ours) in _REGISTRY.items() if ours}

get_llama_structural_tag = _model_function("llama")
get_qwen_3_structural_tag = _model_function("qwen_3")
get_exaone_structural_tag = _model_function("exaone")
get_kimi_structural_tag = _model_function("kimi")
get_deepseek_r1_structural_tag = _model_function("deepseek_r1")
get_deepseek_v3_1_structural_tag = _model_function("deepseek_v3_1")
get_harmony_structural_tag = _model_function("harmony")
get_qwen_3_5_structural_tag = _model_function("qwen_3_5")
get_qwen_3_coder_structural_tag = get_qwen_3_5_structural_tag  # one format, as in xgrammar
get_mimo_structural_tag = _model_function("mimo")
get_kimi_k3_structural_tag = _model_function("kimi_k3")
get_deepseek_v3_2_structural_tag = _model_function("deepseek_v3_2")
get_deepseek_v4_structural_tag = _model_function("deepseek_v4")
get_deepseek_v4_1_structural_tag = _model_function("deepseek_v4_1")
get_minimax_structural_tag = _model_function("minimax")
get_minimax_m3_structural_tag = _model_function("minimax_m3", reasoning_default="auto")
get_glm_4_7_structural_tag = _model_function("glm_4_7")
get_cohere_structural_tag = _model_function("cohere")
