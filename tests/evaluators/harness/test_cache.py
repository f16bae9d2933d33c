"""The providers' prompt-cache rules, billed exactly on hand-made prompts."""

from __future__ import annotations

import pytest

from evaluators.harness.cache import AnthropicCache, OpenAICache, Rules, common_prefix


def prompt(*sizes: int, tag: str = "a") -> list:
    return [((tag, i), tuple(range(i * 10_000, i * 10_000 + n))) for i, n in enumerate(sizes)]


def test_common_prefix_counts_tokens_into_the_first_differing_message() -> None:
    a = prompt(500, 300)
    b = [a[0], (("other",), a[1][1][:120] + (-9,))]
    assert common_prefix(a, b) == 620
    assert common_prefix(a, a) == 800


OPENAI = Rules("openai", input=2.0, output=8.0, cached_input=1.0)


def test_openai_caches_from_1024_tokens_in_128_token_steps() -> None:
    cache = OpenAICache(OPENAI)
    first = cache.charge(prompt(1000, 300), now=0.0, output=10)
    assert (first.cached, first.uncached) == (0, 1300)
    grown = cache.charge(prompt(1000, 300, 50), now=10.0, output=10)
    assert grown.cached == 1280 and grown.uncached == 1350 - 1280  # 1,300 shared -> 1,280
    assert grown.usd(OPENAI) == pytest.approx((70 * 2.0 + 1280 * 1.0 + 10 * 8.0) / 1e6)


def test_openai_short_prefix_and_changed_prefix_are_not_cached() -> None:
    cache = OpenAICache(OPENAI)
    cache.charge(prompt(900, 100), now=0.0, output=0)
    assert cache.charge(prompt(900, 100, 5), now=1.0, output=0).cached == 0  # 1,000 < 1,024
    cache = OpenAICache(OPENAI)
    cache.charge(prompt(2000, 100), now=0.0, output=0)
    changed = prompt(2000, 100)
    changed[0] = (("masked",), changed[0][1][:10])
    assert cache.charge(changed, now=1.0, output=0).cached == 0


def test_openai_entries_expire_after_the_ttl() -> None:
    cache = OpenAICache(Rules("openai", ttl_s=60.0))
    cache.charge(prompt(2000), now=0.0, output=0)
    assert cache.charge(prompt(2000, 10), now=61.0, output=0).cached == 0


ANTHROPIC = Rules("anthropic", input=3.0, output=15.0, write_mult=1.25, read_mult=0.1)


def test_anthropic_writes_at_breakpoints_and_reads_them_later() -> None:
    cache = AnthropicCache(ANTHROPIC)
    first = cache.charge(prompt(1500, 500), [1], now=0.0, output=0)
    assert (first.written, first.cached, first.uncached) == (2000, 0, 0)
    second = cache.charge(prompt(1500, 500, 300), [2], now=10.0, output=0)
    assert (second.cached, second.written, second.uncached) == (2000, 300, 0)
    assert second.usd(ANTHROPIC) == pytest.approx((2000 * 0.3 + 300 * 3.75) / 1e6)


def test_anthropic_without_breakpoints_caches_nothing_and_expires() -> None:
    cache = AnthropicCache(ANTHROPIC)
    cache.charge(prompt(3000), [], now=0.0, output=0)
    assert cache.charge(prompt(3000, 10), [1], now=1.0, output=0).cached == 0
    cache = AnthropicCache(Rules("anthropic", ttl_s=300.0))
    cache.charge(prompt(3000), [0], now=0.0, output=0)
    assert cache.charge(prompt(3000, 10), [1], now=301.0, output=0).cached == 0
    # the miss at 301 s wrote the longer prefix: alive until 601 s
    assert cache.charge(prompt(3000, 10), [1], now=500.0, output=0).cached == 3010


def test_anthropic_looks_back_from_a_breakpoint_for_an_earlier_entry() -> None:
    cache = AnthropicCache(ANTHROPIC)
    cache.charge(prompt(1200, 100), [1], now=0.0, output=0)
    later = cache.charge(prompt(1200, 100, 50, 50), [3], now=1.0, output=0)
    assert later.cached == 1300 and later.written == 100


def test_openai_prefix_ids_find_what_a_message_by_message_walk_finds() -> None:
    """The cache compares prompts by interned prefix ids; the longest shared prefix must be
    the one :func:`common_prefix` walks to, on prompts that share, fork and rejoin."""
    import random

    rng = random.Random(7)
    pool = [((k,), tuple(rng.randrange(50) for _ in range(rng.randrange(1, 400))))
            for k in range(12)]
    stub = [(("stub", k), t[:3] + (999,)) for k, (_, t) in enumerate(pool)]
    rules = Rules("openai", input=2.0, output=8.0, cached_input=1.0, min_cache_tokens=256,
                  step_tokens=16)
    cache = OpenAICache(rules)
    earlier: list = []
    for call in range(120):
        n = rng.randrange(1, 12)
        p = [stub[i] if rng.random() < 0.2 else pool[i] for i in range(n)]
        best = max((common_prefix(p, e) for e in earlier[-64:]), default=0)
        want = best // 16 * 16 if best >= 256 else 0
        assert cache.charge(p, now=float(call), output=0).cached == min(want, sum(
            len(t) for _, t in p)), call
        earlier.append(p)
