"""Every token of an episode with the policy version that sampled it and its logprob.

The episode line keeps only the set of versions; the tokens themselves are in the group's
file under `groups/` (composer-infra's `FinishedGroup`: one `Trajectory` per segment of the
episode, with its `episode_id` and `segment`, and per token its `versions`, behaviour
`logprobs` and `sampled` saying which of them the policy wrote; the rest are the prompt and
tool results fed back in). A group's file is written when its last episode finishes,
so a live episode may have no tokens yet; the page says so and shows the transcript.

Token ids are decoded one by one with the run's tokenizer (the policy's `tokenizer.json`,
found from `config.toml`'s `model` or the run's `final/`); the `tokenizers` library is
loaded directly, not through `composer_model`, so the viewer never imports torch.
"""

from __future__ import annotations

import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

MAX_TOKENS = 50_000
"""Tokens of one segment sent to the page at most (the rest are counted, not shown)."""


class TokenDecoder:
    """One tokenizer.json, decoding single ids (cached: a vocabulary is small)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self._tok = Tokenizer.from_file(str(path))
        self._lock = threading.Lock()
        self._cache: dict[int, str] = {}

    def piece(self, token: int) -> str:
        text = self._cache.get(token)
        if text is None:
            with self._lock:
                text = str(self._tok.decode([token], skip_special_tokens=False))
            self._cache[token] = text
        return text


@lru_cache(maxsize=16)
def _decoder(path: str, mtime: float) -> TokenDecoder:
    return TokenDecoder(Path(path))


def decoder_for(candidates: list[Path]) -> TokenDecoder | None:
    """The first tokenizer file of `candidates` that loads; None if none does."""
    for path in candidates:
        try:
            return _decoder(str(path), path.stat().st_mtime)
        except Exception:  # a missing or unreadable tokenizer: try the next
            continue
    return None


def read_group(path: Path) -> dict[str, Any]:
    """A group file as plain JSON (not validated: an older or odd file still shows)."""
    data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    if not isinstance(data, dict):
        raise ValueError("a group file holds a JSON object")
    return data


def episode_segments(group: dict[str, Any], episode: str) -> list[dict[str, Any]]:
    """The group's trajectories of `episode` (one per context segment), in segment order."""
    out = [
        record
        for record in group.get("episodes") or []
        if isinstance(record, dict) and record.get("episode_id") == episode
    ]
    return sorted(out, key=lambda r: int(r.get("segment", 0) or 0))


def token_view(records: list[dict[str, Any]], decoder: TokenDecoder | None) -> list[dict[str, Any]]:
    """Per segment: prompt and completion pieces as parallel arrays the page colours.

    ``text`` is each token decoded alone (a character split over two tokens shows as the
    replacement character); without a tokenizer the id is shown as ``#id``.
    """

    def pieces(ids: list[Any]) -> list[str]:
        if decoder is None:
            return [f"#{t}" for t in ids]
        return [decoder.piece(int(t)) if isinstance(t, int) else "?" for t in ids]

    segments = []
    for record in records:
        tokens = list(record.get("tokens") or [])
        written = list(record.get("sampled") or [])
        # The context before the policy's first token; the rest, tool results included.
        first = written.index(True) if True in written else len(tokens)
        prompt, completion = tokens[:first], tokens[first:]
        shown = completion[:MAX_TOKENS]
        n = len(shown)
        versions = list(record.get("versions") or [])[first : first + n]
        logprobs = list(record.get("logprobs") or [])[first : first + n]
        sampled = written[first : first + n]
        segment = int(record.get("segment", 0) or 0)
        segments.append(
            {
                "segment": segment,
                "record": f"{record.get('episode_id', '')}.{segment}",
                "reward": record.get("reward"),
                "advantage": record.get("advantage"),
                "prompt": pieces(prompt[-MAX_TOKENS:]),
                "prompt_tokens": len(prompt),
                "text": pieces(shown),
                "versions": versions,
                "logprobs": logprobs,
                "sampled": sampled,
                "completion_tokens": len(completion),
                "left_out": len(completion) - n,
            }
        )
    return segments


__all__ = ["TokenDecoder", "decoder_for", "episode_segments", "read_group", "token_view"]
