"""Chat templates: which template a spec names (built-in ChatML, the tokenizer's own, or a
pasted one) and the sandboxed Jinja environment transformers renders them in."""

from __future__ import annotations

import datetime
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from llm_assets.kernels.tokenize.gpt2 import GPT2
from llm_assets.kernels.tokenize.tokenizer import TokenizerError

if TYPE_CHECKING:
    import jinja2

    from llm_assets.kernels.tokenize.spec import TokenizerSpec


CHATML = "chatml"
CHAT_TEMPLATE_OF_TOKENIZER = "tokenizer"
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The built-in ``chat_template: chatml``: ChatML, each message framed by ``<|im_start|>`` and
``<|im_end|>``, then the assistant's header the response follows."""
CHAT_TEMPLATE_DATE = datetime.date(2024, 7, 26)
"""The day a chat template's ``strftime_now`` gives (Llama 3.1's templates write "Today Date"
with it): always the same, so a prompt does not depend on the day it was tokenized (re-runs and
reused shards agree). It is the date Llama 3.1's own template falls back to without it."""
CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""A tokenizer folder's chat template file (transformers 4.50+), which wins over the
``chat_template`` key of its ``tokenizer_config.json``."""


def chat_template_text(spec: TokenizerSpec) -> str | None:
    """The source of ``spec``'s chat template (None without one): :data:`CHATML_TEMPLATE`, the
    tokenizer folder's own, or the template given. Its digest belongs in a stage fingerprint (a
    ``tokenizer`` template is read from the folder's files, which may change). A setting that
    names no template is a :class:`TokenizerError`."""
    setting = spec.chat_template
    if setting is None:
        return None
    if setting == CHATML:
        return CHATML_TEMPLATE
    if setting == CHAT_TEMPLATE_OF_TOKENIZER:
        return _tokenizers_chat_template(spec.name)
    if "{{" in setting or "{%" in setting:
        return setting
    raise TokenizerError(
        f"chat_template must be 'chatml' (built in), 'tokenizer' (the tokenizer folder's own) or a "
        f"Jinja template (with {{{{ }}}} or {{% %}}), got {setting[:80]!r}"
    )


def _tokenizers_chat_template(name: str) -> str:
    """A tokenizer folder's chat template, read as transformers reads it: ``chat_template.jinja``,
    else the ``chat_template`` of ``tokenizer_config.json`` (a string, or named templates of which
    the one named ``default``)."""
    none = (
        f"chat_template 'tokenizer': tokenizer {name!r} has no chat template of its own; give "
        "'chatml' or a Jinja template's text"
    )
    folder = Path(name)
    if name == GPT2 or not folder.is_dir():
        raise TokenizerError(none)
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        return (folder / CHAT_TEMPLATE_FILE).read_text(encoding="utf-8")
    config_path = folder / "tokenizer_config.json"
    if not config_path.is_file():
        raise TokenizerError(none)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise TokenizerError(
            f"chat_template 'tokenizer': {config_path} is not JSON: {err}"
        ) from None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if not isinstance(named.get("default"), str):
            raise TokenizerError(
                f"chat_template 'tokenizer': {config_path} has several chat templates "
                f"({', '.join(map(str, named))}) and none named 'default'; paste the one to use "
                "as chat_template"
            )
        template = named["default"]
    if not isinstance(template, str) or not template:
        raise TokenizerError(none)
    return template


@lru_cache(maxsize=1)
def _chat_environment() -> jinja2.Environment:
    """The Jinja environment transformers 5.x renders chat templates in
    (``transformers.utils.chat_template_utils``): sandboxed, ``trim_blocks`` and
    ``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag (rendered as its body: the
    assistant mask it tracks there is not used here), a ``tojson`` that keeps non-ASCII and HTML
    characters, ``raise_exception``, and its guarded ``dict`` and ``namespace``. Its
    ``strftime_now`` formats :data:`CHAT_TEMPLATE_DATE`, not today: a prompt must not depend on
    the day it is tokenized (templates such as Granite's call it without a fallback)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        tags = frozenset({"generation"})

        def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: jinja2.runtime.Macro) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: object,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    class TemplateDict:
        def __call__(self, *args: object, **kwargs: object) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: object, **kwargs: object) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: object, **kwargs: object) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: object) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: object) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot set underscore-prefixed attributes, got {name!r}"
                )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson

    def strftime_now(format: str) -> str:
        return CHAT_TEMPLATE_DATE.strftime(format)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


@lru_cache(maxsize=16)
def compiled_chat_template(text: str) -> jinja2.Template:
    """A chat template's source compiled, once per process (kernels run once per batch); a
    syntax error is a :class:`TokenizerError` with Jinja's message and line."""
    import jinja2

    try:
        return _chat_environment().from_string(text)
    except jinja2.TemplateSyntaxError as err:
        raise TokenizerError(
            f"chat_template is not a valid Jinja template: {err.message} (line {err.lineno})"
        ) from None
