"""Prompts to token ids, with the user's text kept as text.

A tokenizer reads special-token text (``<|im_end|>``, ``<start_of_turn>``, ``<bos>``) anywhere
in its input as the special token itself, so a prompt holding ``<|im_end|>`` would close the
user's turn and could open another one (a chat-turn injection). Here special tokens come only
from the chat template's own markup and the tokenizer's BOS: `encode_text` tokenizes plain
text with special-token text split into ordinary tokens; `encode_chat` renders the template,
finds where each message's text went (by rendering it again with placeholders) and reads
special tokens only outside those places. What else the template writes is markup, so it must
not carry special-token text: a role is one of `ROLES` (a role is written into the turn's
header), and names, tool calls and tool definitions holding special-token text are refused. ``special_tokens=True`` restores the tokenizer's
plain behaviour, for prompts written in the model's own format.

A prompt without special-token text tokenizes exactly as the tokenizer tokenizes the rendered
template; one with it tokenizes as the same text would with that markup spelled out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from constrain.errors import ConfigError
from constrain.utf8 import refuse_lone_surrogates

__all__ = ["ROLES", "encode_chat", "encode_text", "render_chat", "special_ids"]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")  # OpenAI's

_PLACEHOLDER = "\ue000{}\ue001"  # private-use characters: text no template or user writes
_PLACEHOLDERS = re.compile("\ue000(\\d+)\ue001")


def special_texts(tokenizer) -> list[str]:
    """The text of the tokenizer's special tokens (those of `special_ids`)."""
    return [t for t in tokenizer.convert_ids_to_tokens(sorted(special_ids(tokenizer))) if t]


def special_ids(tokenizer) -> set[int]:
    """The ids of the tokenizer's special tokens (its named ones and special added tokens)."""
    ids = set(tokenizer.all_special_ids)
    decoder = getattr(tokenizer, "added_tokens_decoder", {})
    ids.update(i for i, token in decoder.items() if getattr(token, "special", False))
    return ids


def encode_text(tokenizer, text: str, *, special_tokens: bool = False) -> list[int]:
    """Token ids of plain text, with the BOS the tokenizer adds (if any); special-token text in
    it is text unless `special_tokens`."""
    refuse_lone_surrogates(text, "prompt")
    ids = list(tokenizer.encode(text, split_special_tokens=not special_tokens))
    if not ids and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id]
    return ids


def encode_chat(
    tokenizer,
    messages: Sequence[Mapping],
    *,
    special_tokens: bool = False,
    tools: Sequence[Mapping] | None = None,
    generation_prompt: bool = True,
) -> list[int]:
    """Token ids of `messages` ({"role", "content"}; an assistant's content may be None
    beside its "tool_calls") rendered by the chat template with `tools` (OpenAI function
    definitions, for templates that take them) and the generation prompt; special tokens only
    where the template writes them unless `special_tokens`.

    Raises:
        ConfigError: a message is not a {"role", "content"} mapping, its role is not one of
            `ROLES`, a field the template writes as markup (a name, a tool call, a tool
            definition) holds special-token text, the template refuses the messages, or (only
            when a message holds special-token text) the template rewrites message text beyond
            trimming it, so its place cannot be found.
    """
    for i, m in enumerate(messages):
        if not (isinstance(m, Mapping) and "role" in m and "content" in m):
            raise ConfigError(f"message {i} is not a {{'role': ..., 'content': ...}} dict: {m!r}")
        if m["role"] not in ROLES:
            raise ConfigError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got "
                              f"{m['role']!r}")  # fmt: skip
    refuse_lone_surrogates({"messages": list(messages), "tools": list(tools or ())}, "")
    if not special_tokens:
        markup = {"messages": [{k: v for k, v in m.items() if k != "content"} for m in messages],
                  "tools": list(tools or ())}  # fmt: skip
        _refuse_special_text(special_texts(tokenizer), markup, "")
    render = dict(tools=list(tools) if tools else None, generation_prompt=generation_prompt)
    text = render_chat(tokenizer, messages, **render)
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if special_tokens or not _holds_special_text(tokenizer, messages):
        return ids
    spans = _content_spans(tokenizer, messages, text, render)
    return _encode_outside(tokenizer, text, spans)


def render_chat(
    tokenizer,
    messages: Sequence[Mapping],
    *,
    tools: Sequence[Mapping] | None = None,
    generation_prompt: bool = True,
) -> str:
    """The chat template's text for `messages` (and `tools`), with the generation prompt.

    Raises:
        ConfigError: the template refuses the messages."""
    extra = {"tools": list(tools)} if tools else {}
    try:
        return tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **extra,
        )
    except Exception as exc:  # jinja's TemplateError and whatever the template raises
        raise ConfigError(f"the chat template refuses these messages: {exc}") from exc


def _holds_special_text(tokenizer, messages: Sequence[Mapping]) -> bool:
    """Whether some message text tokenizes to a special token on its own."""
    special = special_ids(tokenizer)
    return any(
        isinstance(m["content"], str)
        and not special.isdisjoint(tokenizer.encode(m["content"], add_special_tokens=False))
        for m in messages
    )


def _refuse_special_text(specials: list[str], value, where: str) -> None:
    """Raise `ConfigError` naming the first string in `value` (nested lists and mappings, keys
    included) that holds the text of one of `specials`."""
    if isinstance(value, str):
        found = next((s for s in specials if s in value), None)
        if found is not None:
            raise ConfigError(
                f"{where} holds the special token {found!r}; special-token text is allowed only "
                f"in message content (where it stays text)"
            )
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _refuse_special_text(specials, key, where)
            _refuse_special_text(specials, item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _refuse_special_text(specials, item, f"{where}[{i}]")


def _content_spans(
    tokenizer, messages: Sequence[Mapping], text: str, render: Mapping
) -> list[tuple[int, int]]:
    """Where the messages' text lies in `text`, the rendered template: found by rendering
    placeholders instead, then matching the pieces between them (a template may trim)."""
    marked = [
        {**m, "content": _PLACEHOLDER.format(i)} if isinstance(m["content"], str) else dict(m)
        for i, m in enumerate(messages)
    ]
    rendered = render_chat(tokenizer, marked, **render)
    pieces = _PLACEHOLDERS.split(rendered)  # template, index, template, index, ..., template
    spans, pos = [], 0
    for k in range(0, len(pieces) - 1, 2):
        template, after = pieces[k], pieces[k + 2]
        if not text.startswith(template, pos):
            break
        pos += len(template)
        content = messages[int(pieces[k + 1])]["content"]
        fits = [c for c in (content, content.strip()) if text.startswith(c + after[:1], pos)]
        if not fits:
            break
        spans.append((pos, pos + len(fits[0])))
        pos += len(fits[0])
    else:
        if text[pos:] == pieces[-1]:
            return spans
    raise ConfigError(
        "a message holds special-token text, and this chat template rewrites message text "
        "(beyond trimming it), so it cannot be kept as text; pass prompt_special_tokens=True "
        "to read it as special tokens, or chat=False"
    )


def _encode_outside(tokenizer, text: str, spans: list[tuple[int, int]]) -> list[int]:
    """Token ids of `text` with special tokens read only outside `spans`: the text between
    the template's special tokens is tokenized with special-token text split."""
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError as exc:  # a slow tokenizer has no offsets
        raise ConfigError(
            "keeping special-token text in a message as text needs a fast tokenizer; pass "
            "prompt_special_tokens=True to read it as special tokens"
        ) from exc
    special = special_ids(tokenizer)
    out: list[int] = []
    pos = 0
    for token, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
        if token in special and not any(a < end and start < b for a, b in spans):
            out += _plain(tokenizer, text[pos:start])
            out.append(token)
            pos = end
    return out + _plain(tokenizer, text[pos:])


def _plain(tokenizer, text: str) -> list[int]:
    if not text:
        return []
    return list(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))
