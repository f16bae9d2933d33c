"""The suffix store drafts share: integer keys, the longest tail, votes on a continuation."""

import pytest

from evaluators.speculative.suffix import SuffixStore, longest


def _store(seq, **kw):
    store = SuffixStore(vocab=20, **kw)
    store.extend(seq)
    return store


def test_the_longest_tail_is_found_among_the_latest_occurrences():
    store = _store([1, 2, 3, 9, 1, 2, 4, 7, 1, 2, 4, -1, 5, 1, 2])
    n, where = store.matches([7, 1, 2])
    assert (n, where) == (3, [10])  # 7 1 2 once; position 10 follows it (a 4)
    assert store.follow(where, 2, 0.0) == [4]  # then a separator ends the continuation
    n, where = store.matches([0, 1, 2])  # only the two tokens match: every occurrence
    assert n == 2 and where == [2, 6, 10]  # the tail's own position (15) is not indexed
    assert store.matches([1]) == (0, [])  # shorter than min_match
    assert _store([1, 2, 3, 1, 2, 4], max_occ=1).matches([1, 2])[1] == [5]  # the latest only


def test_follow_votes_token_by_token_and_stops_where_the_votes_split():
    store = _store([1, 2, 3, 4, -1, 1, 2, 3, 5, -1, 1, 2, 6])
    _, where = store.matches([1, 2])
    assert store.follow(where, 4, min_share=0.6) == [3]  # 3 twice in three, then 4 or 5
    assert store.follow(where, 4, min_share=0.0) == [3, 4]  # a tie goes to the first seen
    assert store.follow(where, 4, min_share=0.9) == []


def test_online_extension_indexes_only_what_it_completes():
    store = SuffixStore(vocab=20)
    store.extend([4])
    store.extend([5, 6])
    store.extend([4, 5])
    assert store.matches([4, 5]) == (2, [2])
    assert store.follow([2], 3, 0.0) == [6, 4, 5]


def test_longest_prefers_the_first_store_on_a_tie():
    a, b = _store([1, 2, 3]), _store([0, 1, 2, 4, 9, 1, 2, 4])
    n, store, where = longest((a, b), [9, 1, 2])
    assert n == 3 and store is b and where == [7]
    n, store, _ = longest((a, b), [7, 1, 2])
    assert n == 2 and store is a
    assert longest((a,), [8, 8]) == (0, None, [])


def test_min_match_must_be_positive():
    with pytest.raises(ValueError, match="min_match"):
        SuffixStore(vocab=20, min_match=0)
