"""The two baseline policies every evaluation reports beside its scores, as checkpoint directories.

A score means little until one knows what a policy that does nothing useful earns on the same
tasks: an eval where finishing at once scores 0.5 is measuring the tasks, not the policy. So
each baseline is written as a checkpoint directory, and everything that scores a checkpoint
(`composer_rl.eval.evaluate.run_eval`, `composer_rl.eval.scores.score_policy`,
`composer-rl eval --checkpoint DIR`) scores a baseline through the same episode runner, the
same sandboxes, the same hidden-test grading and the same reward plugins. There is no second
episode loop to drift from the first.

* ``do_nothing``: a directory with the reference checkpoint's ``tokenizer.json`` and
  ``scripted_policy.json``. `run_eval` drives it with `FinishAtOnceEngine`, an engine whose
  every generation is the ``finish`` call with an empty message: the agent finishes at its
  first turn, changing nothing, and the untouched repository is graded. No model is loaded.
* ``random``: the reference checkpoint's architecture (its ``config.json``: same preset,
  same sizes) with freshly initialised weights under a fixed seed, and its tokenizer. It is
  a real model run by the real inference engine; it almost never writes a well-formed call.
  Without a reference checkpoint, `composer_rl.agent.quick.random_checkpoint` (the two-layer
  tiny preset) stands in.
"""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, get_args

import torch

from composer_model import ComposerModel, ComposerTokenizer, GenerationResult, ModelConfig
from composer_model import save_pretrained as save_model
from composer_rewards import ToolCall
from composer_rl.agent.format import render_call
from composer_rl.agent.quick import random_checkpoint

BaselineName = Literal["do_nothing", "random"]
BASELINES: tuple[BaselineName, ...] = get_args(BaselineName)
"""Every baseline, in the order reports print them."""

BASELINE_LABELS: dict[str, str] = {"do_nothing": "do-nothing", "random": "random"}
"""How tables head each baseline's column."""

SCRIPTED_POLICY_FILE = "scripted_policy.json"
"""Its presence marks a checkpoint directory whose policy is scripted, not a model."""

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"


class ScriptedEngine:
    """The inference engine's request interface, answering each request with the next text
    of a script.

    It has what `composer_rl.agent.episode.EpisodeRunner` calls on an `InferenceEngine`
    (`add_request`, `step`, `abort`, `end_session`, `max_batch_size`, `max_seq_len`), so a
    scripted policy's episodes run through the real runner: its sandboxes, its tool-call
    parsing, its grading pool. The tokens are the tokenizer's own encoding of each text, so
    the token counts the reward plugins see are those of a model that wrote it.
    """

    def __init__(
        self,
        tokenizer: ComposerTokenizer,
        texts: Iterable[str],
        max_batch_size: int,
        max_seq_len: int,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        self.tokenizer = tokenizer
        self._texts = iter(texts)
        self._pending: dict[str, list[int]] = {}
        self._ids = itertools.count()

    def add_request(self, prompt_ids: list[int], params: object, session: str | None = None) -> str:
        request_id = f"scripted-{next(self._ids)}"
        self._pending[request_id] = list(prompt_ids)
        return request_id

    def step(self) -> list[GenerationResult]:
        done, self._pending = self._pending, {}
        results = []
        for request_id, prompt in done.items():
            text = next(self._texts)
            token_ids = self.tokenizer.encode(text)
            n = len(token_ids)
            results.append(
                GenerationResult(
                    request_id=request_id,
                    prompt_ids=prompt,
                    token_ids=token_ids,
                    text=text,
                    logprobs=[0.0] * n,
                    versions=[0] * n,
                    finish_reason="stop_token",
                )
            )
        return results

    def abort(self, request_id: str) -> bool:
        return self._pending.pop(request_id, None) is not None

    def end_session(self, session: str) -> bool:
        return True


class FinishAtOnceEngine(ScriptedEngine):
    """The do-nothing policy: every generation is the ``finish`` call with an empty message."""

    MESSAGE = ""
    """The final message: empty, so that no grader reads a question or a claim into it."""

    def __init__(self, tokenizer: ComposerTokenizer, max_batch_size: int, max_seq_len: int) -> None:
        finish = render_call(ToolCall(name="finish", arguments={"message": self.MESSAGE}))
        super().__init__(tokenizer, itertools.repeat(finish), max_batch_size, max_seq_len)


def is_scripted(checkpoint: Path) -> bool:
    """Whether `checkpoint` is a scripted baseline (no weights; see `FinishAtOnceEngine`)."""
    return (Path(checkpoint) / SCRIPTED_POLICY_FILE).is_file()


def _reference(like: Path | None, directory: Path, seed: int) -> Path:
    """The checkpoint whose tokenizer (and, for `random`, architecture) a baseline takes:
    `like`, or a quick random tiny checkpoint written under `directory`."""
    if like is not None:
        return Path(like)
    return random_checkpoint(directory / "reference", seed=seed)


def do_nothing_checkpoint(directory: Path, like: Path | None = None, seed: int = 0) -> Path:
    """Write the do-nothing baseline into `directory` (the reference's tokenizer and the
    scripted-policy marker); returns `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    reference = _reference(like, directory, seed)
    shutil.copyfile(reference / TOKENIZER_FILE, directory / TOKENIZER_FILE)
    marker = {"policy": "do_nothing", "engine": "FinishAtOnceEngine", "tokenizer_of": str(like)}
    (directory / SCRIPTED_POLICY_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    return directory


def random_checkpoint_like(directory: Path, like: Path | None = None, seed: int = 0) -> Path:
    """Write the random baseline into `directory`: the reference's config and tokenizer,
    weights initialised afresh under `seed`; returns `directory`."""
    directory = Path(directory)
    if like is None:
        return random_checkpoint(directory, seed=seed)
    config = ModelConfig.from_hf_dict(json.loads((Path(like) / CONFIG_FILE).read_text()))
    torch.manual_seed(seed)
    save_model(ComposerModel(config), directory)
    shutil.copyfile(Path(like) / TOKENIZER_FILE, directory / TOKENIZER_FILE)
    return directory


def baseline_checkpoint(
    name: BaselineName, directory: Path, like: Path | None = None, seed: int = 0
) -> Path:
    """The named baseline's checkpoint directory, written under `directory`."""
    if name == "do_nothing":
        return do_nothing_checkpoint(directory / name, like, seed)
    if name == "random":
        return random_checkpoint_like(directory / name, like, seed)
    raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")


__all__ = [
    "BASELINES",
    "BASELINE_LABELS",
    "SCRIPTED_POLICY_FILE",
    "BaselineName",
    "FinishAtOnceEngine",
    "baseline_checkpoint",
    "do_nothing_checkpoint",
    "is_scripted",
    "random_checkpoint_like",
]
