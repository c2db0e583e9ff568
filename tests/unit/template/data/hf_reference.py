# Developer tool, not part of pagoda: Jinja2 configured the way Hugging Face transformers'
# _compile_jinja_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
# loopcontrols, the {% generation %} extension, tojson with ensure_ascii=False, raise_exception,
# strftime_now), with strftime_now pinned to 2024-07-26 like tests/data/chat_templates/expected.
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_assistant"), [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return datetime(2024, 7, 26).strftime(format)


def compile(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)
