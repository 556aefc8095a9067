"""``xgrammar.openai_tool_call_schema``: the OpenAI tool parameters, from treegram."""

from treegram.structural_tag import BuiltinToolParam, FunctionDefinition, FunctionToolParam

__all__ = ["BuiltinToolParam", "FunctionDefinition", "FunctionToolParam"]
