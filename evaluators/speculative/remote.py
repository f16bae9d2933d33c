"""The trusted side's proxy of a draft that lives in a sandboxed session.

:class:`RemoteDraft` implements the :class:`~evaluators.speculative.api.Draft` interface
for the trusted decoding loop (:func:`~evaluators.speculative.decoding.speculative_decode`)
by sending requests to :func:`evaluators.speculative.serve_draft.draft_server`. One
decoding step is one round trip: ``reset`` and ``accept`` are held back and travel with the
next ``propose``. Everything that comes back is checked before the loop uses it (token ids
inside the vocabulary, no more than ``k``, logits of the right shape, feature layers the
target has), so a hostile answer is a :class:`DraftContractError`, never a crash of the
evaluator. A request that fails (the draft raised, hung past its limit, or its process
died) raises :class:`RemoteFailure` with the session's reason.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from evaluators.speculative.api import Draft, Pick, point_mass
from evaluators.speculative.decoding import DraftContractError


class RemoteFailure(RuntimeError):
    """A request to the draft's process failed; ``timed_out`` when it was killed for it."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.timed_out = timed_out


class RemoteDraft(Draft):
    """A draft in another process; ``deadline`` (perf_counter) bounds every request."""

    trainable = False

    def __init__(self, session: Any, *, vocab: int, n_layers: int, deadline: float,
                 sampled: bool = False):
        super().__init__()
        self.session = session
        self.vocab = vocab
        self.deadline = deadline
        self.sampled = sampled
        self._pending: dict[str, Any] = {}
        self.round_trips = 0
        info = self._request({"op": "info"})
        layers = info.get("feature_layers") if isinstance(info, dict) else None
        if (not isinstance(layers, list) or len(layers) > 2 * n_layers
                or not all(isinstance(i, int) and -n_layers <= i < n_layers for i in layers)):
            raise DraftContractError(f"feature_layers must name layers of the target "
                                     f"(-{n_layers} .. {n_layers - 1}), not {layers!r:.80}")
        self.feature_layers = tuple(layers)

    def _request(self, message: dict[str, Any]) -> Any:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise RemoteFailure("the draft's decoding ran past its time limit", timed_out=True)
        reply = self.session.request(message, timeout_s=left)
        self.round_trips += 1
        if not reply.ok:
            raise RemoteFailure(f"draft ({message.get('op')}): {reply.reason}",
                                timed_out=reply.timed_out)
        return reply.value

    @staticmethod
    def _array(feats: torch.Tensor | None) -> Any:
        return None if feats is None else feats.detach().float().cpu().numpy()

    def reset(self, tokens: torch.Tensor, feats: torch.Tensor | None) -> None:
        self.tokens = [int(t) for t in tokens.tolist()]
        self._pending = {"reset": self.tokens, "feats": self._array(feats)}

    def accept(self, tokens: list[int], feats: torch.Tensor | None) -> None:
        self.tokens.extend(tokens)
        if "accept" in self._pending:  # two accepts without a propose in between
            self._pending["accept"] = [*self._pending["accept"], *tokens]
            old, new = self._pending.get("feats"), self._array(feats)
            self._pending["feats"] = None if old is None or new is None else np.concatenate(
                [old, new])
        elif "reset" not in self._pending:
            self._pending = {"accept": list(tokens), "feats": self._array(feats)}
        else:  # accepted before the first propose: the sequence it is reset with grows
            self._pending["reset"] = self.tokens[:]
            old, new = self._pending.get("feats"), self._array(feats)
            self._pending["feats"] = None if old is None or new is None else np.concatenate(
                [old, new])

    def _tokens(self, value: Any, k: int) -> list[int]:
        if (not isinstance(value, list) or len(value) > k
                or not all(isinstance(t, int) and not isinstance(t, bool) for t in value)):
            raise DraftContractError(f"the draft must propose at most k={k} token ids, "
                                     f"not {value!r:.80}")
        bad = [t for t in value if not 0 <= t < self.vocab]
        if bad:
            raise DraftContractError(f"draft proposed tokens outside the vocabulary of "
                                     f"{self.vocab}: {bad[:4]}")
        return value

    def propose(self, k: int, pick: Pick) -> list[int]:
        message = {"op": "step", "k": int(k), **self._pending}
        self._pending = {}
        if not self.sampled:
            tokens = self._tokens(self._request(message), k)
            take = getattr(pick, "take", None)
            for tok in tokens:  # greedy: the argmax was taken in the draft's process
                if take is not None:
                    take(tok)
                else:
                    pick(point_mass(tok, self.vocab))
            return tokens
        value = self._request({**message, "sampled": True})
        picks = 0
        while True:
            if not isinstance(value, dict):
                raise DraftContractError(f"unexpected answer to a sampled step: {value!r:.80}")
            if "tokens" in value:
                return self._tokens(value["tokens"], k)
            q = value.get("logits")
            if (not isinstance(q, np.ndarray) or q.shape != (self.vocab,)
                    or q.dtype.kind != "f" or np.isnan(q).any() or not np.isfinite(q).any()):
                raise DraftContractError("pick() needs draft logits of shape [vocab] with a "
                                         "finite entry and no NaN")
            picks += 1
            if picks > k:
                raise DraftContractError(f"draft called pick more than k={k} times")
            # the trusted side samples with its own generator and records q
            tok = pick(torch.from_numpy(np.array(q, dtype=np.float64)))
            value = self._request({"op": "pick", "token": int(tok)})
