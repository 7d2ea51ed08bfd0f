"""Chat templates written here in the documented style of each model family (no model's
template is copied), applied to the bundled tokenizer by the server and tool-format tests."""

# Qwen 2.5 / Hermes: tools listed in the system turn, each call a <tool_call> block
HERMES_TEMPLATE = r"""
{%- if tools -%}
{{- '<|im_start|>system\nAssistant with functions.\n\nAvailable functions:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call one, write <tool_call>, a line with {"name": ..., "arguments": {...}}, then </tool_call>.<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content -%}{{- '\n' + message.content -}}{%- endif -%}
{%- for call in message.tool_calls or [] -%}
{{- '\n<tool_call>\n' + ({"name": call.function.name, "arguments": call.function.arguments} | tojson) + '\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""

# Llama 3.1: tools in the first user turn, one bare {"name", "parameters"} call per turn
LLAMA3_TEMPLATE = r"""
{{- '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n' -}}
{%- if tools -%}{{- 'Environment: ipython\n' -}}{%- endif -%}
{{- 'Cutting Knowledge Date: December 2023\n\n<|eot_id|>' -}}
{%- for message in messages -%}
{%- if message.role == 'user' and loop.first and tools -%}
{{- '<|start_header_id|>user<|end_header_id|>\n\nFunctions you can call follow. To call one, answer with only {"name": ..., "parameters": {...}}.\n\n' -}}
{%- for tool in tools -%}{{- (tool | tojson(indent=4)) + '\n\n' -}}{%- endfor -%}
{{- message.content + '<|eot_id|>' -}}
{%- elif message.tool_calls -%}
{%- if message.tool_calls | length != 1 -%}{{- raise_exception('This model only supports single tool-calls at once!') -}}{%- endif -%}
{%- set call = message.tool_calls[0].function -%}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{{- '{"name": "' + call.name + '", "parameters": ' + (call.arguments | tojson) + '}<|eot_id|>' -}}
{%- else -%}
{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content + '<|eot_id|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
"""

# Mistral: [AVAILABLE_TOOLS] before the question, all calls in one [TOOL_CALLS] list
MISTRAL_TEMPLATE = r"""
{{- '<s>' -}}
{%- for message in messages -%}
{%- if message.role == 'user' -%}
{%- if tools and loop.first -%}{{- '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' -}}{%- endif -%}
{{- '[INST] ' + message.content + '[/INST]' -}}
{%- elif message.tool_calls -%}
{{- '[TOOL_CALLS][' -}}
{%- for call in message.tool_calls -%}
{{- {"name": call.function.name, "arguments": call.function.arguments} | tojson -}}
{{- ', ' if not loop.last else '' -}}
{%- endfor -%}
{{- ']</s>' -}}
{%- else -%}
{{- ' ' + message.content + '</s>' -}}
{%- endif -%}
{%- endfor -%}
"""

TEMPLATES = {"hermes": HERMES_TEMPLATE, "llama3": LLAMA3_TEMPLATE, "mistral": MISTRAL_TEMPLATE}

# Qwen3 style: a thinking section <think> ... </think> before the answer; the generation
# prompt leaves it to the model to open
THINKING_TEMPLATE = r"""
{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if message.reasoning_content -%}{{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' -}}{%- endif -%}
{{- message.content + '<|im_end|>\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


# two tools: the weather (an enum among its arguments) and an addition (integers)
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    },
]
