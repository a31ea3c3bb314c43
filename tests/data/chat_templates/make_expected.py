#!/usr/bin/env python3
"""Renders every template here with every case in cases.json as transformers' apply_chat_template
does (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls;
raise_exception; tojson without ASCII escapes) and writes expected.json, which tst_chat_template
compares Mosaic's renderer against. Needs python3-jinja2; run it after changing a template or case."""
import json
import pathlib

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

here = pathlib.Path(__file__).parent


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

cases = json.loads((here / "cases.json").read_text())
expected = {"jinja2": jinja2.__version__}
for path in sorted(here.glob("*.jinja")):
    template = env.from_string(path.read_text())
    out = {}
    for name, context in cases.items():
        try:
            out[name] = {"text": template.render(bos_token="<s>", eos_token="</s>", **context)}
        except jinja2.exceptions.TemplateError as e:  # the template's own refusal: its message
            out[name] = {"error": str(e)}
        except Exception as e:  # a template that cannot take these messages (a list where it adds strings)
            out[name] = {"error": type(e).__name__, "raised_by": "python"}
    expected[path.stem] = out
(here / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
