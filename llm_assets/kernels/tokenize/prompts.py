"""SFT prompts from a ``str.format`` ``prompt_template`` over a record's other fields."""

from __future__ import annotations

import json
import string

from llm_assets.kernels.tokenize.tokenizer import TokenizerError

MISSING_PROMPT_FIELD = "missing_prompt_field"
"""SFT: the record lacks what the prompt is rendered from; value = the ``prompt_template`` field
missing, or for a ``chat_template`` ``messages`` (absent) or what is wrong with it."""


def prompt_fields(template: str) -> list[str]:
    """The field names a prompt template uses; a clear error for a template that cannot render."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as err:
        raise TokenizerError(f"prompt_template is not a valid format string: {err}") from None
    if any(not name or not name.isidentifier() for name in names):
        raise TokenizerError(
            f"prompt_template fields must be plain names like {{instruction}}, got {names}"
        )
    return names


def render_prompts(metadata: list[str | None], template: str) -> tuple[list[str | None], list]:
    """Each row's rendered prompt, or None with the name of the first missing field."""
    names = prompt_fields(template)
    prompts: list[str | None] = []
    missing: list[str | None] = []
    for raw in metadata:
        record = json.loads(raw) if raw else {}
        record = record if isinstance(record, dict) else {}
        absent = next((n for n in names if record.get(n) is None), None)
        if absent is not None:
            prompts.append(None)
            missing.append(absent)
            continue
        values = {n: v if isinstance(v, str) else json.dumps(v) for n, v in record.items()}
        prompts.append(template.format_map(values))
        missing.append(None)
    return prompts, missing
