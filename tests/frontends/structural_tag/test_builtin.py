"""Built-in tool-call structural tags (Llama, Qwen3, DeepSeek, OpenAI Harmony).

The structural tags must equal xgrammar 0.2.8's field for field over a grid of tools, tool
choices, reasoning modes and options; then each model's tag is compiled and a real model
output is matched, with masks bit-identical to xgrammar's on the DeepSeek-V4 vocabulary.
"""

from __future__ import annotations

import itertools
import json

import pytest
from xgrammar_diff import deepseek_env, text_masks_match

import treegram as tg
from treegram.errors import ArgumentError
from treegram.structural_tag import (
    ConstStringFormat,
    FunctionDefinition,
    FunctionToolParam,
    builtin_structural_tag_models,
    normalize_tool_choice,
)

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "ping", "strict": False, "parameters": WEATHER}},
    {"type": "function", "function": {"name": "free"}},
]
BUILTINS = [{"type": "web_search_preview", "name": "browser.search", "parameters": WEATHER}]
CHOICES = [
    "auto",
    "required",
    "none",
    None,
    {"type": "function", "function": {"name": "ping"}},
    {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
    },
    {"type": "web_search_preview"},
]
MODELS = [
    "llama",
    "qwen_3",
    "exaone",
    "kimi",
    "deepseek_r1",
    "deepseek_v3_1",
    "harmony",
    # calls with XML arguments
    "qwen_3_5",
    "qwen_3_coder",
    "mimo",
    "kimi_k3",
    "deepseek_v3_2",
    "deepseek_v4",
    "deepseek_v4_1",
    "minimax",
    "glm_4_7",
    "cohere",
    "minimax_m3",
]


def _outcome(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except ValueError:  # xgrammar's and treegram's errors are both ValueErrors
        return "error"


@pytest.mark.parametrize("model", MODELS)
def test_same_structural_tags_as_xgrammar(model):
    xgr = pytest.importorskip("xgrammar")
    assert model in builtin_structural_tag_models()
    grid = itertools.product(
        CHOICES, ["enabled", "disabled", "auto", True], [True, False], [TOOLS, TOOLS + BUILTINS, []]
    )
    errors = 0
    for choice, reasoning, parallel, tools in grid:
        kwargs = dict(
            tools=tools,
            tool_choice=choice,
            reasoning=reasoning,
            parallel_tool_calls=parallel,
            exclude_special_tokens=parallel,
            max_whitespace_cnt=None if parallel else 4,
        )
        theirs = _outcome(xgr.get_model_structural_tag, model, **kwargs)
        ours = _outcome(tg.get_model_structural_tag, model, **kwargs)
        if theirs == "error":
            assert ours == "error", kwargs
            errors += 1
            continue
        assert ours != "error", kwargs
        assert ours.to_dict() == theirs.model_dump(mode="json"), kwargs
    assert 0 < errors < 100  # both sides refuse the same impossible choices


# (model, tool_choice, reasoning, a model output the structural tag accepts, one it rejects)
OUTPUTS = [
    (
        "llama",
        "auto",
        "disabled",
        'Checking. {"name": "get_weather", "parameters": {"city": "Oslo"}}',
        '{"name": "get_weather", "parameters": {"town": "Oslo"}}',
    ),
    (
        "qwen_3",
        "required",
        "enabled",
        'Weather needed.</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
        '{"city": "Oslo"}}\n</tool_call>',
        "Weather needed.</think>\n\nIt is sunny.",
    ),
    (
        "deepseek_v3_1",
        "auto",
        "auto",
        "<think>hm</think>Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
        '<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "<think>hm</think><think>",
    ),
    (
        "deepseek_r1",
        {"type": "function", "function": {"name": "get_weather"}},
        "disabled",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "Sure!",
    ),
    (
        "exaone",
        "required",
        "auto",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>',
        '<think>x</think>\n\n<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
    ),
    (
        "kimi",
        "auto",
        "disabled",
        "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>',
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:x",
    ),
    (
        "harmony",
        "auto",
        "enabled",
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
        'commentary to=functions.get_weather<|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
        "<|channel|>commentary to=functions.ping<|constrain|>json<|message|>{}<|call|>",
    ),
    (
        "qwen_3_5",
        "auto",
        "disabled",
        "Let me check.<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo, Norway\n"
        "</parameter>\n\n</function>\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=town>Oslo</parameter>",
    ),
    (
        "minimax",
        "required",
        "enabled",
        'Weather.</think>\n\n\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Oslo</parameter>\n</invoke>\n</minimax:tool_call>',
        "Weather.</think>\n\nIt is sunny.",
    ),
    (
        "deepseek_v3_2",
        "auto",
        "auto",
        "<think>hm</think>Checking.<\uff5cDSML\uff5cfunction_calls>\n"
        '<\uff5cDSML\uff5cinvoke name="get_weather">\n'
        '<\uff5cDSML\uff5cparameter name="city" string="true">Oslo</\uff5cDSML\uff5cparameter>\n'
        "</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>",
        "<think>hm</think><\uff5cDSML\uff5cfunction_calls>\n"
        '<\uff5cDSML\uff5cinvoke name="get_weather">\n'
        '<\uff5cDSML\uff5cparameter name="city" string="false">',
    ),
    (
        "minimax_m3",
        "required",
        "disabled",
        ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">'
        "]<]minimax[>[<city>Oslo]<]minimax[>[</city>]<]minimax[>[</invoke>\n"
        "]<]minimax[>[</tool_call>",
        ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<town>',
    ),
    (
        "cohere",
        "auto",
        "disabled",
        'Let me check.<cofl:tool_calls><cofl:tool_call id="0" name="get_weather">'
        '<cofl:value name="city" type="raw">Oslo</cofl:value></cofl:tool_call></cofl:tool_calls>',
        '<cofl:tool_calls><cofl:tool_call id="0" name="get_weather">'
        '<cofl:value name="city" type="json">',
    ),
    (
        "glm_4_7",
        {"type": "function", "function": {"name": "get_weather"}},
        "disabled",
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
        "<tool_call>get_weather<arg_key>town</arg_key>",
    ),
]


@pytest.fixture(scope="module")
def env():
    pytest.importorskip("tokenizers")
    return deepseek_env(pytest.importorskip("xgrammar"))


@pytest.mark.parametrize("model,choice,reasoning,good,bad", OUTPUTS, ids=[o[0] for o in OUTPUTS])
def test_model_outputs_match_xgrammar_masks(env, model, choice, reasoning, good, bad):
    xgr = env["xgr"]
    tools = TOOLS[:1]
    ours_tag = tg.get_model_structural_tag(
        model, tools=tools, tool_choice=choice, reasoning=reasoning
    )
    theirs_tag = xgr.get_model_structural_tag(
        model, tools=tools, tool_choice=choice, reasoning=reasoning
    )
    ours = env["tc"].compile_structural_tag(ours_tag)
    theirs = env["xc"].compile_structural_tag(theirs_tag)
    text_masks_match(env, ours, theirs, good, model)
    m = tg.GrammarMatcher(ours)
    assert not (m.accept_string(bad) and m.accept_token(env["stop"]))


def test_tool_objects_and_choice_normalization():
    tool = FunctionToolParam(function=FunctionDefinition(name="get_weather", parameters=WEATHER))
    assert tg.get_model_structural_tag("qwen_3", tools=[tool]) == tg.get_model_structural_tag(
        "qwen_3", tools=TOOLS[:1]
    )
    functions, builtins, choice = normalize_tool_choice(TOOLS + BUILTINS, "none")
    assert (functions, builtins, choice) == ([], [], "auto")
    functions, builtins, choice = normalize_tool_choice(
        TOOLS + BUILTINS, {"type": "web_search_preview"}
    )
    assert functions == [] and [b.name for b in builtins] == ["browser.search"]
    assert choice == "forced"
    assert tg.get_builtin_structural_tag is tg.get_model_structural_tag
    json.dumps(tg.get_model_structural_tag("harmony", tools=TOOLS).to_dict())  # JSON-able


def test_register_a_model_with_xgrammars_calling_convention():
    seen = {}

    @tg.register_model_structural_tag("my_model")
    def build(tools, builtin_tools, tool_choice, reasoning, **options):
        seen.update(choice=tool_choice, reasoning=reasoning, names=[t.function.name for t in tools])
        seen.update(options)
        return tg.StructuralTag(format=ConstStringFormat(value="only this"))

    tag = tg.get_model_structural_tag(
        "my_model", tools=TOOLS, tool_choice="required", reasoning=False
    )
    assert tag.to_dict()["format"] == {"type": "const_string", "value": "only this"}
    assert seen == dict(
        choice="required",
        reasoning="disabled",
        names=["get_weather", "ping", "free"],
        any_order=False,
        exclude_special_tokens=True,
        max_whitespace_cnt=None,
        parallel_tool_calls=True,
    )
    assert "my_model" in builtin_structural_tag_models()
    with pytest.raises(ArgumentError, match="name must be a non-empty string"):
        tg.register_model_structural_tag("")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(model="gpt-9"), r"model must be one of \[.*'llama'.*\], got 'gpt-9'"),
        (dict(model="llama", tools={"a": 1}), "tools must be a list, got dict"),
        (dict(model="llama", tools=[{"type": "function"}]), r"tools\[0\]\.function must be"),
        (
            dict(model="llama", tools=[{"type": "function", "function": {"name": 3}}]),
            r"tools\[0\]\.function\.name must be a string, got int",
        ),
        (dict(model="llama", tools=[], tool_choice="required"), "needs at least one tool"),
        (
            dict(model="llama", tools=TOOLS, tool_choice={"type": "function", "function": {}}),
            r"tool_choice\.function\.name must be a string",
        ),
        (
            dict(
                model="llama",
                tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "nope"}},
            ),
            "names function 'nope', not in tools",
        ),
        (dict(model="llama", tools=TOOLS, tool_choice="always"), "tool_choice must be"),
        (dict(model="qwen_3", tools=TOOLS, reasoning="maybe"), "reasoning must be"),
        (
            dict(model="llama", tools=BUILTINS, tool_choice="required"),
            "needs a function tool: this model's format has no builtin tools",
        ),
        (dict(model="llama", tools=TOOLS, parallel_tool_calls=1), "parallel_tool_calls must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        tg.get_model_structural_tag(**kwargs)


# -- xgrammar's per-model functions ----------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_per_model_functions_match_xgrammar(model):
    """``get_<model>_structural_tag`` takes normalized tools (function and builtin tools
    apart, tool_choice in auto/required/forced) and builds the same tag as xgrammar's."""
    import treegram.structural_tag as st

    xbst = pytest.importorskip("xgrammar.builtin_structural_tag")
    ours_fn = getattr(st, f"get_{model}_structural_tag")
    theirs_fn = getattr(xbst, f"get_{model}_structural_tag")
    assert ours_fn.__name__ == theirs_fn.__name__  # qwen_3_coder is an alias in both
    functions, builtins, _ = tg.normalize_tool_choice(TOOLS + BUILTINS, "auto")
    their_functions = [xbst._TOOL_ADAPTER.validate_python(t) for t in TOOLS]
    their_builtins = [xbst._TOOL_ADAPTER.validate_python(t) for t in BUILTINS]
    for choice, reasoning in itertools.product(["auto", "required"], ["enabled", "auto"]):
        fns = functions if model != "harmony" else functions
        ours = _outcome(ours_fn, fns, builtins, choice, reasoning, parallel_tool_calls=False)
        theirs = _outcome(
            theirs_fn, their_functions, their_builtins, choice, reasoning,
            parallel_tool_calls=False,
        )  # fmt: skip
        if theirs == "error":
            assert ours == "error"
            continue
        assert ours.to_dict() == theirs.model_dump(mode="json"), (choice, reasoning)
    # same as going through get_model_structural_tag
    # (minimax_m3's own function defaults to reasoning="auto", as xgrammar's)
    assert ours_fn(functions, reasoning="enabled") == tg.get_model_structural_tag(
        model, tools=TOOLS
    )


def test_qwen_3_coder_is_qwen_3_5():
    import treegram.structural_tag as st

    assert st.get_qwen_3_coder_structural_tag is st.get_qwen_3_5_structural_tag
    assert tg.get_model_structural_tag("qwen_3_coder", tools=TOOLS) == (
        tg.get_model_structural_tag("qwen_3_5", tools=TOOLS)
    )


def test_kimi_k3_arguments_exclude_the_markers():
    from treegram.testing import _is_grammar_accept_string as accepts

    text = (
        "hm<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>"
        '<|open|>tools<|sep|><|open|>call tool="get_weather" index="0"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    )
    for exclude in (True, False):
        tag = tg.get_model_structural_tag(
            "kimi_k3", tools=TOOLS[:1], tool_choice="required", exclude_special_tokens=exclude
        )
        grammar = tg.Grammar.from_structural_tag(tag)
        assert accepts(grammar, text)
        assert not accepts(grammar, text.replace('type="string"', 'type="number"'))
        # a marker inside a string value: excluded unless exclude_special_tokens=False
        assert accepts(grammar, text.replace("Oslo", "Os<|sep|>lo")) is not exclude
    # markers inside the strings of a JSON value (an array of strings): JSON Schema excludes
    nested = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
    }
    tools = [{"type": "function", "function": {"name": "f", "parameters": nested}}]
    call = (
        '<|open|>tools<|sep|><|open|>call tool="f" index="0"<|sep|>'
        '<|open|>argument key="tags" type="array"<|sep|>{}<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"
    )
    text = "hm<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>" + call
    for exclude in (True, False):
        tag = tg.get_model_structural_tag(
            "kimi_k3", tools=tools, tool_choice="required", exclude_special_tokens=exclude
        )
        grammar = tg.Grammar.from_structural_tag(tag)
        assert accepts(grammar, text.format('["a", "b"]'))
        assert accepts(grammar, text.format('["a<|sep|>b"]')) is not exclude
        assert accepts(grammar, text.format('["a<|open|>"]')) is not exclude


def test_per_model_function_arguments_are_checked():
    import treegram.structural_tag as st

    with pytest.raises(ArgumentError, match="tool_choice must be 'auto', 'required' or 'forced'"):
        st.get_llama_structural_tag(tool_choice="none")
    with pytest.raises(ArgumentError, match="tools must be a list"):
        st.get_llama_structural_tag(tools="x")
    with pytest.raises(ArgumentError, match=r"builtin_tools\[0\] must be a BuiltinToolParam"):
        st.get_harmony_structural_tag(builtin_tools=TOOLS[:1])
    with pytest.raises(ArgumentError, match="reasoning must be"):
        st.get_qwen_3_structural_tag(reasoning="maybe")


def test_a_tool_without_type_is_a_function_tool():
    bare = [{"function": {"name": "get_weather", "parameters": WEATHER}}]
    functions, builtins, _ = tg.normalize_tool_choice(bare, "auto")
    assert [f.function.name for f in functions] == ["get_weather"] and builtins == []
    assert tg.get_model_structural_tag("qwen_3", tools=bare) == tg.get_model_structural_tag(
        "qwen_3", tools=TOOLS[:1]
    )
    xgr = pytest.importorskip("xgrammar")
    theirs = xgr.get_model_structural_tag("qwen_3", tools=bare).model_dump(mode="json")
    assert tg.get_model_structural_tag("qwen_3", tools=bare).to_dict() == theirs
    with pytest.raises(ArgumentError, match=r"tools\[0\]\.function\.name"):
        tg.get_model_structural_tag("llama", tools=[{"function": {}}])
