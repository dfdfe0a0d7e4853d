#!/usr/bin/env python3
"""Renders tests/text/templates/*.jinja with Python jinja2 into tests/text/fixtures/templates/.

The environment replicates Hugging Face transformers' chat-template rendering
(`apply_chat_template(..., tokenize=False)`): an ImmutableSandboxedEnvironment with
trim_blocks=True, lstrip_blocks=True, the loopcontrols extension, a `{% generation %}` block
that just renders its body, transformers' tojson filter (json.dumps, ensure_ascii=False, key order
kept), raise_exception and strftime_now (here with a fixed time, in UTC). The context is what
transformers passes: messages, tools (None when absent), documents (None), add_generation_prompt,
the special tokens and the extra keyword arguments.

Each output file holds, per case, the inputs and either the expected text or the expected error
(`raise` is true when the template itself called raise_exception; loom must then fail with the
same message). chat_template_fixture_test.cc replays them byte for byte.

Usage: build/venv/bin/python tests/text/make_template_fixtures.py   (needs jinja2)
"""

import datetime
import json
import pathlib

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
OUT = HERE / "fixtures" / "templates"

# 2024-07-25 10:00:00 UTC; the C++ test passes the same instant to strftime_now.
NOW_UNIX_SECONDS = 1721901600


class TemplateRaised(jinja2.exceptions.TemplateError):
    """raise_exception() called by the template itself."""


class GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}`: renders the body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise TemplateRaised(message)

    def strftime_now(fmt):
        now = datetime.datetime.fromtimestamp(NOW_UNIX_SECONDS, tz=datetime.timezone.utc)
        return now.strftime(fmt)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
CLOCK_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "Time now.", "parameters": {"type": "object", "properties": {}}},
}

SYSTEM = {"role": "system", "content": "You are a careful assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "And of Italy?"}
TOOL_CALL_DICT = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call12345", "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}],
}
TOOL_CALL_STR = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "abcDEF123", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}
TOOL_RESULT_STR = {"role": "tool", "tool_call_id": "abcDEF123", "content": "18 degrees"}

CONVERSATIONS = {
    "user_only": [USER],
    "system_user": [SYSTEM, USER],
    "multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
    "no_system_multi": [USER, ASSISTANT, USER2],
    "unicode": [{"role": "user", "content": "Grüß dich! 你好 🌍 «quotes» \"double\" 'single' back\\slash\nnew line\ttab"},
                {"role": "assistant", "content": "¡Hola! ñ — ü 😀"},
                {"role": "user", "content": "  padded content  \n"}],
    "empty_content": [USER, {"role": "assistant", "content": ""}, USER2],
    "tool_call_dict": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}, TOOL_CALL_DICT, TOOL_RESULT],
    "tool_call_str": [{"role": "user", "content": "Weather in Rome?"}, TOOL_CALL_STR, TOOL_RESULT_STR,
                      {"role": "assistant", "content": "It is 18 degrees in Rome."}],
    "thinking": [USER, {"role": "assistant", "content": "<think>\nThe user asks about France.\n</think>\n\nParis."},
                 USER2],
    "reasoning_field": [USER, {"role": "assistant", "content": "Paris.", "reasoning_content": "France -> Paris."},
                        USER2],
    "ipython": [{"role": "user", "content": "Run it."}, TOOL_CALL_DICT,
                {"role": "ipython", "content": "{\"output\": 42}"}],
    "double_user": [USER, USER2],
    "assistant_first": [ASSISTANT, USER],
    "list_content": [{"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                  {"type": "text", "text": " this."}]}],
}

CHAT_TEMPLATES = ["llama3", "llama31", "mistral_v1", "mistral_tools", "chatml_qwen", "qwen3",
                  "gemma", "deepseek"]


def chat_cases():
    cases = []
    for conv_name, messages in CONVERSATIONS.items():
        uses_tools = conv_name.startswith("tool") or conv_name == "ipython"
        for gen in (False, True):
            cases.append({"name": f"{conv_name}{'_gen' if gen else ''}", "messages": messages,
                          "tools": [WEATHER_TOOL, CLOCK_TOOL] if uses_tools else None,
                          "add_generation_prompt": gen, "kwargs": {}})
    cases.append({"name": "tools_no_calls", "messages": [SYSTEM, USER], "tools": [WEATHER_TOOL],
                  "add_generation_prompt": True, "kwargs": {}})
    cases.append({"name": "no_thinking", "messages": CONVERSATIONS["thinking"], "tools": None,
                  "add_generation_prompt": True, "kwargs": {"enable_thinking": False}})
    cases.append({"name": "custom_date", "messages": [USER], "tools": None,
                  "add_generation_prompt": True, "kwargs": {"date_string": "01 Jan 2030"}})
    return cases


# Feature templates: variables come through kwargs.
FEATURE_CONTEXT = {
    "name": "World",
    "items": ["b", "a", "C", "a"],
    "nums": [3, 1, 2, -7, 10],
    "floats": [1.0, 2.5, -0.125, 1e16, 1.5e-7, 3.14159],
    "user": {"name": "ada", "age": 36, "tags": ["x", "y"], "meta": {"k": None, "ok": True}},
    "people": [{"name": "Bob", "age": 30, "admin": True}, {"name": "alice", "age": 25, "admin": False},
               {"name": "Carol", "age": 35}],
    "text": "  Hello, World! hello again.  ",
    "csv": "a,b,,c",
    "empty": [],
    "nothing": None,
    "flag": False,
    "big": 12345678901234,
    "unicode": "Größe ÄÖÜ 日本語",
}
FEATURE_TEMPLATES = ["features_expr", "features_filters", "features_statements", "features_whitespace",
                     "features_strings", "features_macros", "features_tests", "features_tojson"]

ERROR_CASES = ["raise", "undefined_attr", "bad_add", "not_callable", "div_zero", "unknown_filter",
               "bad_unpack", "nested_raise"]


def render(env, source, case):
    context = {"messages": case["messages"], "tools": case["tools"], "documents": None,
               "add_generation_prompt": case["add_generation_prompt"]}
    context.update(TOKENS)
    context.update(case["kwargs"])
    try:
        text = env.from_string(source).render(**context)
        return {"expected": text}
    except TemplateRaised as e:
        return {"error": str(e), "raise": True}
    except jinja2.exceptions.TemplateError as e:
        return {"error": f"{type(e).__name__}: {e}", "raise": False}
    except (TypeError, ValueError, ZeroDivisionError, AttributeError, KeyError, IndexError) as e:
        return {"error": f"{type(e).__name__}: {e}", "raise": False}


def write(name, cases, env):
    source = (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")
    out_cases = []
    for case in cases:
        record = {"name": case["name"], "messages": case["messages"], "tools": case["tools"],
                  "add_generation_prompt": case["add_generation_prompt"], "kwargs": case["kwargs"]}
        record.update(render(env, source, case))
        out_cases.append(record)
    doc = {"template": f"{name}.jinja", "special_tokens": TOKENS, "now_unix_seconds": NOW_UNIX_SECONDS,
           "cases": out_cases}
    (OUT / f"{name}.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum(1 for c in out_cases if "error" in c)
    print(f"{name}: {len(out_cases)} cases ({errors} errors)")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    env = make_environment()
    for name in CHAT_TEMPLATES:
        write(name, chat_cases(), env)
    feature_cases = [{"name": "default", "messages": [USER, ASSISTANT], "tools": None,
                      "add_generation_prompt": False, "kwargs": FEATURE_CONTEXT}]
    for name in FEATURE_TEMPLATES:
        write(name, feature_cases, env)
    error_cases = [{"name": c, "messages": [USER], "tools": None, "add_generation_prompt": False,
                    "kwargs": {"case": c}} for c in ERROR_CASES]
    write("errors", error_cases, env)


if __name__ == "__main__":
    main()
