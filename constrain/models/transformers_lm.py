"""A Hugging Face causal LM as a `LanguageModel` of KV-cache streams.

A `KVStream` is one sequence: its tokens and a KV cache covering a prefix of them. Tokens are
appended cheaply and fed lazily, so the next `logprobs` call runs one forward over whatever
is pending. `score` feeds k tokens in one forward and returns k + 1 rows (verification for
speculative decoding); `fork` copies the cache; `rollback` crops it.

Streams stepped together (SMC particles, batches of prompts) keep their caches stacked in one
`_Batch` between calls, so a step of N streams is one forward with no copying; the stack is
rebuilt only when the set of streams changes (a particle finishes, resampling forks some and
drops others), and a fork of a stacked stream is free (it shares its row).

Invariant: the stream's cache (its own ``_cache``, or its view of a batch row) holds exactly
``stream.tokens[:stream._n_fed]``; ``stream._last`` is the next-token distribution after all
tokens when ``_n_fed == len(tokens)``, else None.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from constrain.errors import ConfigError, ContextLengthError
from constrain.models.kernels import Kernels, use_kernels
from constrain.models.prompts import encode_chat, encode_text

if TYPE_CHECKING:
    from constrain.models.base import LanguageModel

_MIN_SHARED_PREFIX = 16  # prompt tokens in common before a cached prompt is reused
_END_OF_TURN = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """ "auto" picks CUDA, then MPS, then the CPU."""
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def context_length(config) -> int | None:
    """The context window a `transformers` config states, or None."""
    for attribute in ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx"):
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    text = getattr(config, "text_config", None)  # multimodal configs nest the language model's
    return context_length(text) if text is not None else None


def _device_of(hf_model) -> torch.device:
    """The device of a model's input embeddings (where input ids go)."""
    embeddings = hf_model.get_input_embeddings()
    if embeddings is not None:
        return embeddings.weight.device
    return next(hf_model.parameters()).device


def _left_pad(states: torch.Tensor, length: int) -> torch.Tensor:
    """Zero-pad a (1, heads, seq, dim) cache tensor on the left to `length` positions."""
    return torch.nn.functional.pad(states, (0, 0, length - states.shape[-2], 0))


def _new_cache(config, layers: list[tuple[torch.Tensor, torch.Tensor]]):
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for i, (keys, values) in enumerate(layers):
        cache.update(keys, values, i)
    return cache


class _Batch:
    """The KV caches of several streams stacked in one cache, one row per stream.

    ``mask[r, c]`` is 1 where column c of row r holds a real token (0 for left padding, and
    for the holes right padding leaves when rows feed different numbers of tokens). Columns
    are only ever appended, so a stream's view, its row up to the width the batch had when the
    stream was last fed, stays valid while the batch grows: forks can share a row.
    """

    __slots__ = ("cache", "mask")

    def __init__(self, cache, mask: torch.Tensor):
        self.cache = cache
        self.mask = mask

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    def view(self, row: int, cols: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row `row`'s real positions among its first `cols` columns, per layer (1, h, n, d)."""
        keep = self.mask[row, :cols].nonzero().squeeze(1)
        return [
            (layer.keys[row : row + 1, :, keep], layer.values[row : row + 1, :, keep])
            for layer in self.cache.layers
        ]


class KVStream:
    """One sequence being generated: its tokens and KV cache (see the module docstring); a
    `constrain.models.Stream`."""

    __slots__ = ("tokens", "prompt_len", "_cache", "_n_fed", "_last", "_batch", "_row", "_cols")

    def __init__(self, tokens: list[int], cache, n_fed: int, last: torch.Tensor | None):
        self.tokens = tokens
        self.prompt_len = len(tokens)
        self._cache = cache
        self._n_fed = n_fed
        self._last = last
        self._batch: _Batch | None = None  # when stacked: the batch, its row, its view's width
        self._row = 0
        self._cols = 0

    @property
    def generated(self) -> list[int]:
        """Tokens appended after the prompt."""
        return self.tokens[self.prompt_len :]

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"KVStream(len={len(self.tokens)}, prompt_len={self.prompt_len}, fed={self._n_fed})"


class TransformersLM:
    """Any `transformers` causal LM with a tokenizer, as streams with KV caches (a
    `LanguageModel`).

    Args:
        hf_model: a `PreTrainedModel` with a causal-LM head; it is put in eval mode.
        tokenizer: its tokenizer.
        name: a display name.
        device: "auto" (CUDA, then MPS, then the CPU) or a torch device: the model is moved
            there; None keeps it where it is (and in its dtype).
        kernels: "measure" (default): on the CPU, the linear layers take whichever product
            measured faster on this machine for the few rows of decoding steps, CFG and
            verification (`constrain.models.kernels`; timed once per process, well under a
            second for SmolLM2-135M); "torch": plain ``F.linear``. Off the CPU layers are
            never patched. Same weights, same results up to float rounding.

    Attributes:
        context_length: the model's context window in tokens, read from its config
            (``max_position_embeddings`` or its older names); None if the config has none.
            Generation refuses a prompt that, with ``max_tokens``, would not fit. Set it to
            hold a model to a shorter window (or None to lift the check).
    """

    def __init__(
        self,
        hf_model,
        tokenizer,
        *,
        name: str = "",
        device: str | torch.device | None = "auto",
        kernels: Kernels = "measure",
    ):
        if device is None:
            self.device = _device_of(hf_model)
            self.hf_model = hf_model.eval()
        else:
            self.device = resolve_device(device)
            self.hf_model = hf_model.to(self.device).eval()
        self.kernels = kernels
        self.kernel_layers = use_kernels(self.hf_model, kernels)  # patched / plain counts
        parameters = inspect.signature(self.hf_model.forward).parameters
        self._keeps_logits = "logits_to_keep" in parameters
        # the KV cache argument: `cache` since transformers 5.x, `past_key_values` before
        self._cache_arg = "cache" if "cache" in parameters else "past_key_values"
        self.tokenizer = tokenizer
        self.context_length = context_length(self.hf_model.config)
        self.name = name or getattr(hf_model.config, "name_or_path", "") or type(hf_model).__name__
        self._vocab = None
        self.prompt_cache_bytes = 256 * 2**20  # KV caches of recent prompts, for prefix reuse
        self._prompts: dict[tuple[int, ...], KVStream] = {}  # oldest first

    # -- vocabulary and prompts -----------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """The logits dimension (may exceed the tokenizer's length)."""
        return int(self.hf_model.get_output_embeddings().weight.shape[0])

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """Token ids that end generation: the tokenizer's and generation config's EOS, and the
        end-of-turn token of chat models."""
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen = getattr(self.hf_model, "generation_config", None)
        configured = getattr(gen, "eos_token_id", None) if gen is not None else None
        if configured is not None:
            ids.update([configured] if isinstance(configured, int) else configured)
        if self.has_chat_template:
            vocab = self.tokenizer.get_vocab()
            ids.update(vocab[t] for t in _END_OF_TURN if t in vocab)
        return tuple(sorted(ids))

    @property
    def vocab(self):
        """The `constrain.Vocabulary` of this model (built once)."""
        if self._vocab is None:
            from constrain.engine.vocab import Vocabulary

            self._vocab = Vocabulary.from_tokenizer(
                self.tokenizer, size=self.vocab_size, eos_ids=self.eos_ids
            )
        return self._vocab

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_prompt(
        self,
        prompt: str | Sequence[dict],
        *,
        chat: bool | None = None,
        system: str | None = None,
        special_tokens: bool = False,
    ) -> list[int]:
        """Token ids of a prompt; the chat template is applied when the tokenizer has one.

        The prompt's text is text: special-token text in it (``<|im_end|>``) is tokenized as
        ordinary characters, so special tokens come only from the chat template and the
        tokenizer's BOS (`constrain.models.prompts`).

        Args:
            prompt: a user message, or a list of ``{"role", "content"}`` messages.
            chat: force (True) or skip (False) the chat template; None = when available.
            system: an optional system message (without the chat template: written before
                the prompt, then a blank line).
            special_tokens: read special-token text in the prompt as those tokens (for prompts
                written in the model's own format).
        """
        if not isinstance(prompt, (str, Sequence)) or isinstance(prompt, bytes):
            raise ConfigError(
                f"a prompt is a string or a list of {{'role', 'content'}} messages, got "
                f"{type(prompt).__name__}"
            )
        use_chat = self.has_chat_template if chat is None else chat
        if use_chat:
            if not self.has_chat_template:
                raise ConfigError(f"{self.name} has no chat template; pass chat=False")
            messages = (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            )
            if system is not None:
                messages = [{"role": "system", "content": system}, *messages]
            return encode_chat(self.tokenizer, messages, special_tokens=special_tokens)
        if not isinstance(prompt, str):
            raise ConfigError("a list of messages needs the chat template (chat=True)")
        text = prompt if system is None else f"{system}\n\n{prompt}"
        return encode_text(self.tokenizer, text, special_tokens=special_tokens)

    # -- streams --------------------------------------------------------------------------------

    def _own_cache(self, stream: KVStream):
        """The stream's cache as its own (copied out of a batch row if stacked)."""
        if stream._batch is not None:
            stream._cache = _new_cache(
                self.hf_model.config, stream._batch.view(stream._row, stream._cols)
            )
            stream._batch = None
        return stream._cache

    def _forward(
        self, stream: KVStream, token_ids: list[int], last_only: bool = False
    ) -> torch.Tensor:
        """Feed `token_ids` after the cached prefix; returns their (n, V) float32 log-probs.

        With `last_only` (and a model that supports ``logits_to_keep``) only the last row is
        computed, (1, V): a long prefill then skips the vocabulary head for every other token.
        """
        from transformers import DynamicCache

        self._own_cache(stream)
        if stream._cache is None:
            stream._cache = DynamicCache(config=self.hf_model.config)
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        extra = {"logits_to_keep": 1} if last_only and self._keeps_logits else {}
        with torch.inference_mode():
            out = self.hf_model(
                input_ids=ids, use_cache=True, **{self._cache_arg: stream._cache}, **extra
            )
        stream._cache = _cache_of(out)
        stream._n_fed += len(token_ids)
        return torch.log_softmax(out.logits[0].float(), dim=-1)

    def start(self, prompt_ids: Sequence[int], *, prefill: bool = True) -> KVStream:
        """A stream over `prompt_ids`, prefilled (the first `logprobs` call is then free); with
        `prefill` False, not yet: `prefill` feeds it in chunks.

        Recently prefilled prompts are kept (up to `prompt_cache_bytes` of KV cache): a prompt
        that shares a prefix of at least 16 tokens with one of them (the same system message
        and few-shot examples, the same prompt again) only prefills the rest.

        Raises:
            ContextLengthError: the prompt is longer than `context_length` (before any forward).
        """
        ids = [int(t) for t in prompt_ids]
        if not ids:
            raise ValueError("a stream needs at least one prompt token")
        if self.context_length is not None and len(ids) > self.context_length:
            raise ContextLengthError(
                f"the prompt has {len(ids)} tokens but {self.name}'s context holds "
                f"{self.context_length}: shorten the prompt",
                len(ids),
                0,
                self.context_length,
            )
        stream = KVStream(ids, None, 0, None)
        if prefill:
            self.prefill(stream)
        return stream

    def prefill(self, stream: KVStream, max_tokens: int | None = None) -> int:
        """Feed at most `max_tokens` (None: all) of the prompt `stream` has not fed yet;
        returns how many are left. A stream that has fed nothing takes the longest cached
        prefix of its prompt first (so a second choice of the same prompt, prefilled after
        the first, feeds nothing and gets the first's distribution, bit for bit); the whole
        prompt, once fed, is cached in turn."""
        if stream._n_fed == 0:
            base, shared = self._cached_prefix(stream.tokens)
            if base is not None:
                cached = self.fork(base)
                self.rollback(cached, len(base.tokens) - shared)
                stream._cache, stream._n_fed = cached._cache, cached._n_fed
                if cached._n_fed == len(stream.tokens):  # the whole prompt: its distribution
                    stream._last = cached._last
        left = len(stream.tokens) - stream._n_fed
        take = left if max_tokens is None else min(left, max_tokens)
        if take:
            chunk = stream.tokens[stream._n_fed : stream._n_fed + take]
            last = self._forward(stream, chunk, last_only=True)[-1]
            if take == left:
                stream._last = last
                self._remember_prompt(stream)
        return left - take

    def _cached_prefix(self, ids: list[int]) -> tuple[KVStream | None, int]:
        """The cached prompt sharing the longest prefix with `ids` (at least 16 tokens), and
        that length."""
        best, best_len = None, _MIN_SHARED_PREFIX - 1
        for cached in self._prompts.values():
            n = 0
            limit = min(len(cached.tokens), len(ids))
            while n < limit and cached.tokens[n] == ids[n]:
                n += 1
            if n > best_len:
                best, best_len = cached, n
        return best, best_len

    def _remember_prompt(self, stream: KVStream) -> None:
        cache = stream._cache
        if cache is None or any(layer.is_sliding for layer in cache.layers):
            return  # a sliding-window cache cannot be cropped back to a prefix
        self._prompts[tuple(stream.tokens)] = self.fork(stream)
        while self._prompts and self.prompt_cache_used > self.prompt_cache_bytes:
            self._prompts.pop(next(iter(self._prompts)))

    @property
    def prompt_cache_used(self) -> int:
        """Bytes of KV cache held for recent prompts (at most `prompt_cache_bytes`)."""
        return sum(
            layer.keys.nbytes + layer.values.nbytes
            for s in self._prompts.values()
            for layer in s._cache.layers
        )

    def append(self, stream: KVStream, token: int) -> None:
        """Record `token`; it is fed at the next `logprobs` or `score`."""
        stream.tokens.append(int(token))
        stream._last = None

    def logprobs(self, streams: Sequence[KVStream]) -> torch.Tensor:
        """(B, V) next-token log-probabilities, one row per stream.

        The pending tokens of all streams are fed in one batched forward over their stacked
        caches (left-padded to a common length; new tokens right-padded; an attention mask
        hides the padding). The stack is kept for the next call with the same streams. Models
        with sliding-window layers (Gemma-3) are fed one stream at a time.
        """
        todo = [s for s in streams if s._last is None]
        if len(todo) == 1 or (todo and not self._batchable(todo)):
            for stream in todo:
                stream._last = self._forward(
                    stream, stream.tokens[stream._n_fed :], last_only=True
                )[-1]
        elif todo:
            self._forward_batch(todo)
        return torch.stack([s._last for s in streams])

    def _batchable(self, streams: Sequence[KVStream]) -> bool:
        for s in streams:
            cache = s._batch.cache if s._batch is not None else s._cache
            if cache is None or s._n_fed == 0 or any(layer.is_sliding for layer in cache.layers):
                return False
        return True

    def _stack(self, streams: Sequence[KVStream]) -> _Batch:
        """A batch whose row i is streams[i]'s cache (the existing one when it already is)."""
        first = streams[0]._batch
        if first is not None and len(streams) == first.mask.shape[0]:
            if all(
                s._batch is first and s._row == i and s._cols == first.width
                for i, s in enumerate(streams)
            ):
                return first  # the same streams as last step: nothing to copy
        if first is not None and all(
            s._batch is first and s._cols == first.width for s in streams
        ):  # rows of one batch (resampled, some dropped): one gather per layer
            rows = torch.tensor([s._row for s in streams], device=self.device)
            mask = first.mask.index_select(0, rows)
            start = int(mask.any(0).nonzero()[0]) if mask.any() else 0
            layers = [
                (
                    layer.keys.index_select(0, rows)[:, :, start:],
                    layer.values.index_select(0, rows)[:, :, start:],
                )
                for layer in first.cache.layers
            ]
            return _Batch(_new_cache(self.hf_model.config, layers), mask[:, start:])
        views = []
        for s in streams:
            if s._batch is not None:
                views.append(s._batch.view(s._row, s._cols))
            else:
                views.append([(layer.keys, layer.values) for layer in s._cache.layers])
        width = max(v[0][0].shape[-2] for v in views)
        layers = [
            (
                torch.cat([_left_pad(v[i][0], width) for v in views]),
                torch.cat([_left_pad(v[i][1], width) for v in views]),
            )
            for i in range(len(views[0]))
        ]
        mask = torch.zeros((len(streams), width), dtype=torch.long, device=self.device)
        for row, v in enumerate(views):
            mask[row, width - v[0][0].shape[-2] :] = 1
        return _Batch(_new_cache(self.hf_model.config, layers), mask)

    def _forward_batch(self, streams: Sequence[KVStream]) -> list[torch.Tensor]:
        """Feed every stream's pending tokens in one forward (see `logprobs`); returns each
        stream's (n_pending, V) log-probabilities."""
        batch = self._stack(streams)
        past = [s._n_fed for s in streams]
        pending = [s.tokens[s._n_fed :] for s in streams]
        N, B = max(len(p) for p in pending), len(streams)
        ids = torch.zeros((B, N), dtype=torch.long, device=self.device)
        new_mask = torch.zeros((B, N), dtype=torch.long, device=self.device)
        for row, new in enumerate(pending):
            ids[row, : len(new)] = torch.tensor(new, device=self.device)
            new_mask[row, : len(new)] = 1
        positions = torch.tensor(past, device=self.device)[:, None] + torch.arange(
            N, device=self.device
        )
        mask = torch.cat([batch.mask, new_mask], dim=1)
        # Without padding (particles of one prompt, stepped together) neither mask nor
        # positions are passed: attention then takes the fused causal kernel instead of a
        # masked one that copies the grouped keys and values for every head.
        padded = not bool(mask.all())
        with torch.inference_mode():
            out = self.hf_model(
                input_ids=ids,
                attention_mask=mask if padded else None,
                position_ids=positions if padded else None,
                use_cache=True,
                **{self._cache_arg: batch.cache},
            )
        batch.cache, batch.mask = _cache_of(out), mask
        rows = []
        for row, (stream, new) in enumerate(zip(streams, pending)):
            stream._cache = None
            stream._batch, stream._row, stream._cols = batch, row, batch.width
            stream._n_fed += len(new)
            rows.append(torch.log_softmax(out.logits[row, : len(new)].float(), dim=-1))
            stream._last = rows[-1][-1]
        return rows

    def score(self, stream: KVStream, tokens: Sequence[int]) -> torch.Tensor:
        """Append `tokens` and return (k + 1, V) log-probs from one forward.

        Row 0 is the distribution before ``tokens[0]``, row i the one after ``tokens[:i]``.
        """
        return self.score_many([stream], [tokens])[0]

    def score_many(
        self, streams: Sequence[KVStream], token_lists: Sequence[Sequence[int]]
    ) -> list[torch.Tensor]:
        """`score` for several streams in one batched forward (speculative verification of a
        target and its processors' term streams, or of the branches of a draft tree)."""
        starts = []
        for stream, tokens in zip(streams, token_lists):
            pending = len(stream.tokens) - stream._n_fed
            if not pending and stream._last is None:  # only right after a rollback to 0 fed
                raise RuntimeError("stream has no distribution to start from")
            starts.append((pending, stream._last))
            stream.tokens.extend(int(t) for t in tokens)
        todo = [s for s in streams if len(s.tokens) > s._n_fed]
        if len(todo) > 1 and self._batchable(todo):
            fed = dict(zip(map(id, todo), self._forward_batch(todo)))
        else:
            fed = {id(s): self._forward(s, s.tokens[s._n_fed :]) for s in todo}
        results = []
        for stream, (pending, before) in zip(streams, starts):
            rows = fed.get(id(stream))
            if rows is None:
                result = before.unsqueeze(0)
            elif pending:
                result = rows[pending - 1 :]
            else:
                result = torch.cat([before.unsqueeze(0), rows])
            stream._last = result[-1]
            results.append(result)
        return results

    def fork(self, stream: KVStream) -> KVStream:
        """An independent copy of `stream` (a stacked stream shares its row: no copy)."""
        twin = KVStream(list(stream.tokens), None, stream._n_fed, stream._last)
        twin.prompt_len = stream.prompt_len
        if stream._batch is not None:
            twin._batch, twin._row, twin._cols = stream._batch, stream._row, stream._cols
        else:
            twin._cache = copy.deepcopy(stream._cache)
        return twin

    def rollback(self, stream: KVStream, n: int) -> None:
        """Drop the last `n` tokens; the KV cache is cropped to match."""
        if not 0 <= n < len(stream.tokens):
            raise ValueError(f"cannot roll back {n} of {len(stream.tokens)} tokens")
        if n == 0:
            return
        del stream.tokens[-n:]
        keep = len(stream.tokens)
        if stream._n_fed >= keep:
            # keep tokens[:keep-1] cached; the last token is re-fed to get its distribution
            self._own_cache(stream).crop(-(stream._n_fed - (keep - 1)))
            stream._n_fed = keep - 1
            stream._last = None
        stream.prompt_len = min(stream.prompt_len, keep)

    def with_layers(self, layers: Sequence[int], *, name: str | None = None) -> TransformersLM:
        """The same model with only the decoder `layers` (in order), sharing their weights:
        a cheap draft for self-speculative decoding, or an amateur for contrastive decoding.

        Raises:
            ValueError: the architecture keeps its layers elsewhere than ``model.layers``, or
                `layers` is empty or out of range.
        """
        base = getattr(self.hf_model, "model", None)
        blocks = getattr(base, "layers", None)
        if not isinstance(blocks, torch.nn.ModuleList):
            raise ConfigError(f"{self.name}: no model.layers to choose from")
        chosen = list(layers)
        if not chosen or any(not 0 <= i < len(blocks) for i in chosen):
            raise ConfigError(
                f"layers must be a non-empty subset of 0..{len(blocks) - 1}: {chosen}"
            )
        config = copy.copy(self.hf_model.config)
        config.num_hidden_layers = len(chosen)
        if getattr(config, "layer_types", None):
            config.layer_types = [config.layer_types[i] for i in chosen]
        new_blocks = torch.nn.ModuleList(_renumbered(blocks[i], j) for j, i in enumerate(chosen))
        new_base = _shallow(base, layers=new_blocks)
        new_base.config = config
        hf_model = _shallow(self.hf_model, model=new_base)
        hf_model.config = config
        twin = TransformersLM(
            hf_model,
            self.tokenizer,
            name=name or f"{self.name}[{len(chosen)} layers]",
            device=None,  # the shared layers are already in place
            kernels=self.kernels,
        )
        twin._vocab = self._vocab
        twin.context_length = self.context_length
        return twin

    def __repr__(self) -> str:
        return f"TransformersLM({self.name!r}, device={self.device}, vocab_size={self.vocab_size})"


def _shallow(module: torch.nn.Module, **children: torch.nn.Module) -> torch.nn.Module:
    """A copy of `module` sharing its parameters, with some child modules replaced."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)
    twin._modules.update(children)
    return twin


def _renumbered(block: torch.nn.Module, index: int) -> torch.nn.Module:
    """A decoder block sharing its weights whose attention caches at layer `index`."""
    attention = getattr(block, "self_attn", None)
    if attention is None or not hasattr(attention, "layer_idx"):
        raise ValueError(f"{type(block).__name__} has no self_attn.layer_idx to renumber")
    new_attention = _shallow(attention)
    new_attention.layer_idx = index
    twin = _shallow(block, self_attn=new_attention)
    if hasattr(twin, "layer_idx"):
        twin.layer_idx = index
    return twin


def _cache_of(output):
    """The KV cache of a forward's output (`cache` since transformers 5.x)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


if TYPE_CHECKING:  # a static check that the class implements the protocol
    _conforms: type[LanguageModel[KVStream]] = TransformersLM
