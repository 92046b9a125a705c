#!/usr/bin/env python3
"""Writes tests/tokenizer/data/chat_llama3_reference.json: Llama 3 chat prompts rendered by `jinja2`
from Meta's published chat templates (Llama 3.0 Instruct; Llama 3.2 Instruct, which calls
strftime_now; and the same template with Llama 3.1's fixed date_string default), for the chat
cases of reference_common.py. The templates are reference data, as published in the models'
tokenizer_config.json; strftime_now is given a fixed date (the test passes the same one), as
transformers would give today's.
  pip install jinja2==3.1.6
  python3 tests/tokenizer/make_chat_llama3_reference.py tests/tokenizer/data/chat_llama3_reference.json
"""
import json
import sys

import jinja2

import reference_common as rc

LLAMA30 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

LLAMA32 = '{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0][\'role\'] == \'system\' %}\n    {%- set system_message = messages[0][\'content\']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = "" %}\n{%- endif %}\n\n{#- System message #}\n{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}\n{%- if tools is not none %}\n    {{- "Environment: ipython\\n" }}\n{%- endif %}\n{{- "Cutting Knowledge Date: December 2023\\n" }}\n{{- "Today Date: " + date_string + "\\n\\n" }}\n{%- if tools is not none and not tools_in_user_message %}\n    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n    {{- "Do not use variables.\\n\\n" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- "\\n\\n" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- "<|eot_id|>" }}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0][\'content\']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n{%- endif %}\n    {{- \'<|start_header_id|>user<|end_header_id|>\\n\\n\' -}}\n    {{- "Given the following functions, please respond with a JSON for a function call " }}\n    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}\n    {{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n    {{- "Do not use variables.\\n\\n" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- "\\n\\n" }}\n    {%- endfor %}\n    {{- first_user_message + "<|eot_id|>"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == \'ipython\' or message.role == \'tool\' or \'tool_calls\' in message) %}\n        {{- \'<|start_header_id|>\' + message[\'role\'] + \'<|end_header_id|>\\n\\n\'+ message[\'content\'] | trim + \'<|eot_id|>\' }}\n    {%- elif \'tool_calls\' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n            {{- raise_exception("This model only supports single tool-calls at once!") }}\n        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n        {{- \'<|start_header_id|>assistant<|end_header_id|>\\n\\n\' -}}\n        {{- \'{"name": "\' + tool_call.name + \'", \' }}\n        {{- \'"parameters": \' }}\n        {{- tool_call.arguments | tojson }}\n        {{- "}" }}\n        {{- "<|eot_id|>" }}\n    {%- elif message.role == "tool" or message.role == "ipython" %}\n        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- "<|eot_id|>" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- \'<|start_header_id|>assistant<|end_header_id|>\\n\\n\' }}\n{%- endif %}\n'

# Llama 3.1's date logic: a fixed default, no strftime_now.
LLAMA31_DATE = LLAMA32.replace(
    '{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        '
    '{%- set date_string = strftime_now("%d %b %Y") %}\n    {%- else %}\n        '
    '{%- set date_string = "26 Jul 2024" %}\n    {%- endif %}\n{%- endif %}',
    '{%- if not date_string is defined %}\n    {%- set date_string = "26 Jul 2024" %}\n{%- endif %}')
assert LLAMA31_DATE != LLAMA32

TODAY = "05 Mar 2026"
TEMPLATES = {"llama3.0": LLAMA30, "llama3.1": LLAMA31_DATE, "llama3.2": LLAMA32}
CASES = rc.CHAT_CASES + [{"user": "  padded user text \n", "system": "  padded system\t"},
                         {"user": "\u3000wide space\u3000", "system": None}]


def main():
    out = []
    for name, text in TEMPLATES.items():
        env = jinja2.Environment()
        tmpl = env.from_string(text)
        for c in CASES:
            prompt = tmpl.render(messages=rc.chat_messages(c), add_generation_prompt=True,
                                 bos_token="", strftime_now=lambda fmt: TODAY)
            out.append({"template_name": name, "template": text, "user": c["user"],
                        "system": c["system"], "prompt": prompt})
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/tokenizer/make_chat_llama3_reference.py",
                   "jinja2_version": jinja2.__version__, "today": TODAY, "chat": out}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} prompts")


if __name__ == "__main__":
    main()
