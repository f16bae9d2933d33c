from hypothesis import given, settings
from hypothesis import strategies as st

from evaluators.speculative.bpe import BPETokenizer, train_bpe

TEXT = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return f(y) * 2  # é\n" * 20


def test_training_reaches_the_vocabulary_and_compresses():
    assert train_bpe(TEXT, 270).vocab_size == 270
    tok = train_bpe(TEXT, 400)  # stops early once every word is a single token
    assert 270 < tok.vocab_size < 400
    assert all(len(tok.encode(w)) == 1 for w in ("def", "return", "\n    "))
    ids = tok.encode(TEXT)
    assert len(ids) < len(TEXT.encode()) / 2
    assert tok.decode(ids) == TEXT


def test_json_round_trip_keeps_the_encoding():
    tok = train_bpe(TEXT, 280)
    again = BPETokenizer.from_json(tok.to_json())
    assert again.encode(TEXT) == tok.encode(TEXT)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_any_text_round_trips(text):
    tok = train_bpe(TEXT, 280)
    assert tok.decode(tok.encode(text)) == text
