"""One chat interface over a local HF model, an OpenAI-compatible endpoint, or a test stub.

Methods that drive an LLM agent or generator (Skill-Pro, CyberPal, algorithm steering, ...) take a
``ChatModel`` so the same code runs on SmolLM2 here, on a user's local model, or against a vLLM /
SGLang / OpenAI server at paper scale.

    >>> chat = get_chat("stub:echo")
    >>> chat.chat([{"role": "user", "content": "hi"}])
    'hi'

Specs for ``get_chat``: ``"local"`` (SmolLM2-135M-Instruct), ``"local:PATH"`` (an HF folder or
.gguf), ``"http://HOST:PORT/v1#MODEL"`` / ``"https://…#MODEL"`` (OpenAI-compatible; key from
``$OPENAI_API_KEY``), ``"stub:echo"`` (returns the last user message).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from icml26.core.errors import UserError

Message = dict[str, str]
_ROLES = ("system", "user", "assistant")


def check_messages(messages: Sequence[Message]) -> list[Message]:
    """Validate a chat: a non-empty list of {"role": system|user|assistant, "content": str}."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise UserError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(
                m.get("content"), str):
            raise UserError(
                f"messages[{i}] = {m!r}: expected {{'role': one of {_ROLES}, 'content': str}}"
            )
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    if not stop:
        return text
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]


@runtime_checkable
class ChatModel(Protocol):
    """Anything with ``chat(messages, *, max_new_tokens, temperature, seed, stop) -> str``."""

    def chat(self, messages: Sequence[Message], *, max_new_tokens: int = 256,
             temperature: float = 0.0, seed: int | None = None,
             stop: Sequence[str] | None = None) -> str: ...


class StubChat:
    """A loopback chat for tests: ``fn(messages) -> str``; records every call in ``calls``."""

    def __init__(self, fn: Callable[[list[Message]], str]):
        self.fn = fn
        self.calls: list[list[Message]] = []

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        msgs = check_messages(messages)
        self.calls.append(msgs)
        return _cut_at_stop(str(self.fn(msgs)), stop)


class LocalChat:
    """Chat with a local HF causal LM through its tokenizer's chat template.

    Args:
        model: None/"smollm2" (SmolLM2-135M-Instruct), an HF folder or .gguf path, or an already
            loaded ``(model, tokenizer)`` pair.
        dtype: torch dtype name; bfloat16 is ~3x faster than float32 on AVX-512-BF16 CPUs.
        device: torch device string.
    """

    def __init__(self, model=None, dtype: str = "bfloat16", device: str = "cpu"):
        from icml26.core.lm import load_lm
        from icml26.core.torchutil import parse_dtype

        if isinstance(model, tuple):
            self.model, self.tokenizer = model
        else:
            self.model, self.tokenizer = load_lm(model, dtype=parse_dtype(dtype), device=device)
        if not getattr(self.tokenizer, "chat_template", None):
            raise UserError(f"the tokenizer of {model!r} has no chat template; use a chat model")
        self.device = next(self.model.parameters()).device

    def prompt_ids(self, messages: Sequence[Message]):
        """Token ids (1, t) of the templated chat with the assistant turn opened."""
        enc = self.tokenizer.apply_chat_template(
            check_messages(messages), add_generation_prompt=True, return_tensors="pt",
            return_dict=True)
        return enc["input_ids"].to(self.device)

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        import torch

        if max_new_tokens < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise UserError(f"temperature must be >= 0, got {temperature}")
        ids = self.prompt_ids(messages)
        kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=self.tokenizer.eos_token_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature), top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        with torch.random.fork_rng(devices=[] if self.device.type == "cpu" else [self.device]):
            if seed is not None:
                torch.manual_seed(seed)
            with torch.inference_mode():
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        text = self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        return _cut_at_stop(text, stop)


class OpenAIChat:
    """An OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, llama.cpp, OpenAI).

    Args:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the served model name.
        api_key: bearer token; default ``$OPENAI_API_KEY`` (none sent when unset).
        timeout: seconds per request.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout: float = 60.0):
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"base_url {base_url!r} must start with http:// or https://")
        if not model:
            raise UserError("OpenAIChat needs a model name")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        body = {"model": self.model, "messages": check_messages(messages),
                "max_tokens": int(max_new_tokens), "temperature": float(temperature)}
        if seed is not None:
            body["seed"] = int(seed)
        if stop:
            body["stop"] = list(stop)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise UserError(f"{self.url} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, TimeoutError) as exc:
            raise UserError(f"cannot reach {self.url}: {exc}") from None
        except json.JSONDecodeError:
            raise UserError(f"{self.url} did not answer with JSON") from None
        try:
            return _cut_at_stop(payload["choices"][0]["message"]["content"] or "", stop)
        except (KeyError, IndexError, TypeError):
            raise UserError(
                f"{self.url}: expected choices[0].message.content in the answer, got "
                f"{str(payload)[:200]}"
            ) from None


def get_chat(spec: str, *, dtype: str = "bfloat16", device: str = "cpu") -> ChatModel:
    """Build a chat model from a spec string (see the module docstring)."""
    if spec == "local" or spec == "local:smollm2":
        return LocalChat(None, dtype=dtype, device=device)
    if spec.startswith("local:"):
        return LocalChat(spec[len("local:"):], dtype=dtype, device=device)
    if spec.startswith(("http://", "https://")):
        base, sep, model = spec.partition("#")
        if not sep or not model:
            raise UserError(f"chat spec {spec!r}: write the model after '#', e.g. "
                            "http://localhost:8000/v1#my-model")
        return OpenAIChat(base, model)
    if spec == "stub:echo":
        return StubChat(lambda msgs: next(
            (m["content"] for m in reversed(msgs) if m["role"] == "user"), ""))
    raise UserError(f"chat spec {spec!r} not understood; expected 'local', 'local:PATH', "
                    "'http(s)://HOST/v1#MODEL' or 'stub:echo'")
