"""The LLM proposer: chat completions on any OpenAI-compatible endpoint.

One call per proposal, with the messages of :mod:`optimizer.proposers.prompt` (a system
message byte-identical for every call on one target, so that provider prompt caches hit,
and a user message with what changes). The answer's edits are applied strictly onto the
parent; every unusable answer becomes ``Proposal(rejected=reason)``, which the loop feeds
back. With several models, each call picks one by weight or by Thompson sampling on
improvements per USD; every call can be written to a cassette for replay.

Retries are done here, not by the openai client (its ``max_retries`` is 0), so that the
backoff is tested: exponential with jitter from a seeded RNG, honouring ``Retry-After``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from optimizer.config import LLMConfig
from optimizer.edits import apply_edits, parse_edits
from optimizer.errors import ConfigError, EditError
from optimizer.proposers._base import ArchiveEntry, ProposalContext, Proposer
from optimizer.proposers.cassette import CassetteWriter
from optimizer.proposers.prompt import (  # re-exported: the names were first defined here
    DIFF_SHARE,
    PromptBook,
    _clip,
    feedback_window,
    render_messages,
    system_prompt,
    user_prompt,
    worked_example,
)
from optimizer.records import CandidateState, Proposal, Usage

__all__ = [
    "DIFF_SHARE",
    "LLMProposer",
    "PromptBook",
    "api_key",
    "feedback_window",
    "proposal_from_answer",
    "render_messages",
    "system_prompt",
    "usage_from_json",
    "user_prompt",
    "worked_example",
]

_RETRIABLE_STATUS = {408, 409, 425, 429}


def _is_local(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host in ("localhost", "") or host.endswith((".local", ".internal")) or "." not in host:
        return True  # "vllm" in a compose network, "localhost", mDNS names
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return addr.is_private or addr.is_loopback or addr.is_link_local


def api_key(settings: LLMConfig) -> str:
    """The key from ``api_key_env``; a placeholder for local servers that need none."""
    key = os.environ.get(settings.api_key_env, "")
    if key:
        return key
    if settings.base_url and _is_local(settings.base_url):
        return "not-needed"  # vLLM, Ollama, llama.cpp accept any key unless started with one
    where = settings.base_url or "the OpenAI API"
    raise ConfigError(
        f"environment variable {settings.api_key_env} is not set, and {where} needs a key; "
        f"export {settings.api_key_env}=... or set api_key_env to the variable that holds it",
        key="proposer.llm.api_key_env",
    )


# --------------------------------------------------------------------------- the answer


def _summary(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip().lstrip("*#").strip()
        if stripped.upper().startswith("SUMMARY:"):
            return stripped[len("SUMMARY:") :].strip()[:200]
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def proposal_from_answer(
    ctx: ProposalContext,
    *,
    proposer: str,
    text: str,
    finish_reason: str | None,
    error: str | None,
    usage: Usage,
    prompt: str,
) -> Proposal:
    """Turn one model answer into a Proposal; every unusable answer is a rejection."""
    base = Proposal(
        proposer=proposer,
        parent_id=ctx.parent.id,
        files=dict(ctx.parent.files),
        summary=_summary(text),
        prompt=prompt,
        response=text,
        usage=usage,
    )

    def reject(reason: str) -> Proposal:
        return dataclasses.replace(base, rejected=reason)

    if error:
        return reject(error)
    if finish_reason == "length":
        return reject(
            "the answer was cut off at the token limit (finish_reason=length); give a shorter "
            "answer: fewer, smaller SEARCH/REPLACE blocks and no long explanations"
        )
    if not text.strip():
        return reject(f"the model returned an empty answer (finish_reason={finish_reason})")
    try:
        edits = parse_edits(text, ctx.target.editable)
        files = apply_edits(ctx.parent.files, edits, ctx.target.symbols)
    except EditError as exc:
        return reject(f"edit rejected: {exc}")
    try:
        from optimizer import knobs
    except ImportError:  # knob declarations are then checked by nobody here
        knobs = None  # type: ignore[assignment]
    if knobs is not None:
        try:
            knobs.knobs_of_files(files)
        except knobs.KnobError as exc:
            return reject(f"bad knob declaration: {exc}")
    return dataclasses.replace(base, files=files)


# --------------------------------------------------------------------------- the proposer


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass
class _Arm:
    proposals: int = 0
    improvements: int = 0
    calls: int = 0
    usd: float = 0.0


class LLMProposer(Proposer):
    """Proposals from a chat model; see the module docstring and docs/llm.md."""

    name = "llm"

    def __init__(
        self,
        settings: LLMConfig,
        *,
        cassette: Path | None = None,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai  # here: evaluators and offline runs never need it

        self.settings = settings
        self._openai = openai
        self._client = openai.OpenAI(
            api_key=api_key(settings),
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            max_retries=0,
        )
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._cassette = CassetteWriter(cassette) if cassette is not None else None
        self._calls: dict[str, int] = {}
        self._prompts = PromptBook(settings)
        self._arms = {name: _Arm() for name in settings.model_names}
        self._parents: dict[str, tuple[float, bool]] = {}

    # -- model choice

    def _pick_model(self) -> str:
        names = self.settings.model_names
        if len(names) == 1:
            return names[0]
        if self.settings.selection == "weights":
            return self._rng.choices(names, weights=[w for _, w in self.settings.models])[0]
        spent = [a.usd / a.calls for a in self._arms.values() if a.calls]
        prior_cost = sum(spent) / len(spent) if spent else 1.0

        def score(name: str) -> float:
            arm = self._arms[name]
            p = self._rng.betavariate(1 + arm.improvements, 1 + arm.proposals - arm.improvements)
            cost = arm.usd / arm.calls if arm.calls else prior_cost
            return p / cost if cost > 0 else p

        return max(names, key=score)

    def observe(self, entry: ArchiveEntry) -> None:
        model = entry.proposer.removeprefix("llm:")
        arm = self._arms.get(model)
        if arm is None or not entry.proposer.startswith("llm:"):
            return
        arm.proposals += 1
        parent = self._parents.get(entry.parent_id or "")
        if entry.state is CandidateState.VALID and entry.objectives and parent is not None:
            value, minimize = parent
            if (entry.objectives[0] < value) if minimize else (entry.objectives[0] > value):
                arm.improvements += 1

    # -- one call with retries

    def _create(self, model: str, messages: list[dict[str, str]], target: str) -> Any:
        s = self.settings
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        if s.reasoning_effort:
            kwargs["reasoning_effort"] = s.reasoning_effort
        if s.max_tokens:
            # OpenAI's reasoning models accept only max_completion_tokens; local servers
            # (vLLM, Ollama, llama.cpp) all read max_tokens.
            kwargs["max_completion_tokens" if s.base_url is None else "max_tokens"] = s.max_tokens
        if s.base_url is None:
            kwargs["prompt_cache_key"] = f"optimizer/{target}"  # routes to the same cache
        return self._client.chat.completions.create(**kwargs)

    def _call(
        self, model: str, messages: list[dict[str, str]], target: str
    ) -> tuple[Any, str | None, int]:
        """(response or None, error or None, attempts)."""
        errors = self._openai
        reason = ""
        attempts = 0
        for attempt in range(self.settings.max_retries + 1):
            attempts = attempt + 1
            wait: float | None = None
            try:
                response = self._create(model, messages, target)
                if not getattr(response, "choices", None):
                    reason = "the server's answer has no choices (malformed response)"
                else:
                    return response, None, attempts
            except errors.APIStatusError as exc:
                status = exc.status_code
                reason = f"HTTP {status} from the model server: {_clip(str(exc.message), 300)}"
                if status not in _RETRIABLE_STATUS and status < 500:
                    return None, reason, attempts  # 400, 401, 404: retrying cannot help
                wait = _retry_after(exc.response.headers)
            except errors.APITimeoutError:
                reason = f"the model server did not answer within {self.settings.timeout_s:g} s"
            except errors.APIConnectionError as exc:
                reason = f"cannot reach the model server: {exc}"
            except ValueError as exc:  # the body was not JSON (a proxy's error page, cut off)
                reason = f"the model server's answer is not valid JSON ({exc})"
            if attempt == self.settings.max_retries:
                break
            if wait is None:
                step = min(self.settings.retry_max_s, self.settings.retry_base_s * 2**attempt)
                wait = step / 2 + self._rng.uniform(0, step / 2)  # equal jitter
            self._sleep(min(wait, self.settings.retry_max_s))
        return None, f"gave up after {attempts} attempt(s): {reason}", attempts

    def _usage(self, model: str, response: Any, messages: list[dict[str, str]], text: str) -> Usage:
        raw = getattr(response, "usage", None)
        if raw is None:
            # No usage reported: estimate at 4 characters per token so budgets still hold.
            prompt = sum(len(m["content"]) for m in messages) // 4
            completion, cached = len(text) // 4, 0
        else:
            prompt, completion = raw.prompt_tokens or 0, raw.completion_tokens or 0
            details = getattr(raw, "prompt_tokens_details", None)
            cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        usd = self.settings.prices.usd(prompt, cached, completion)
        return Usage(prompt, cached, completion, usd, 1, model)

    # -- the contract

    def propose(self, context: ProposalContext) -> Proposal:
        target = context.target
        messages = self._prompts.messages(context)
        model = self._pick_model()
        if context.parent.objectives:
            self._parents[context.parent.id] = (
                context.parent.objectives[0],
                target.primary.minimize,
            )
        started = time.monotonic()
        response, error, attempts = self._call(model, messages, target.name)
        elapsed = time.monotonic() - started
        text, finish = "", None
        usage = Usage(calls=1, model=model)
        if response is not None:
            choice = response.choices[0]
            text = (choice.message.content if choice.message else None) or ""
            finish = choice.finish_reason
            usage = self._usage(model, response, messages, text)
        arm = self._arms[model]
        arm.calls += 1
        arm.usd += usage.usd
        index = self._calls.get(target.name, 0)
        self._calls[target.name] = index + 1
        if self._cassette is not None:
            self._cassette.append(
                {
                    "target": target.name,
                    "index": index,
                    "model": model,
                    "parent_id": context.parent.id,
                    "messages": messages,
                    "response": text,
                    "finish_reason": finish,
                    "error": error,
                    "usage": dataclasses.asdict(usage),
                    "attempts": attempts,
                    "elapsed_s": round(elapsed, 3),
                    "time": datetime.now(UTC).isoformat(timespec="seconds"),
                }
            )
        return proposal_from_answer(
            context,
            proposer=f"llm:{model}",
            text=text,
            finish_reason=finish,
            error=error,
            usage=usage,
            prompt=render_messages(messages),
        )

    def close(self) -> None:
        self._client.close()


def usage_from_json(data: Mapping[str, Any]) -> Usage:
    """The inverse of ``dataclasses.asdict(usage)`` as written to a cassette."""
    fields = {f.name for f in dataclasses.fields(Usage)}
    return Usage(**{k: v for k, v in json.loads(json.dumps(data)).items() if k in fields})
