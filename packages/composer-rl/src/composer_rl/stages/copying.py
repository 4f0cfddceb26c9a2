"""Pretraining data that can only be predicted by copying from context.

Two kinds. `copy_documents`: synthetic documents of invented names defined and used again,
mixed into pretraining (`corpus.copy_documents`). `repeated_stretches`: the copy warm-up
(`copy_warmup`), a phase before pretraining on stretches of the corpus each written twice,
trained on the second copy only, so that the model forms induction heads first (see below).

The SFT policy of 2026-12-03 learned the agent format and the behaviours of its
demonstrations but not to copy a name from the instruction into a tool call (its guess was
right at 0.40 of the names, 0.95 elsewhere: `benchmarks/name_copy.py`), and the standard
library teaches little of it in 400 steps: a name there is mostly a common word the model
can recall. These documents use invented identifiers, each defined once and used again
further on (a module named in a comment and then imported and read, a function defined and
then called, a parameter and a constant), so the only way to predict a later occurrence is
to find the earlier one: the copying that induction heads do, which small models learn
quickly from data that demands it.

The identifiers are `composer_rl.tasks.invented.invented_name`'s: syllables, never a name of
the task vocabulary of either split, so no held-out name is pretrained on.

Mixed in, they did not teach copying (docs/rl/2026-12-03-copying.md): stage one's 400
pretraining steps form no induction head at all, and on the bare task (a sequence written
twice) the tiny preset sits at the uniform loss for about 2,000 steps before the circuit
forms in a jump, while a plain transformer with learned positions takes about 500. The
warm-up gives that jump its own phase, on the corpus's own tokens (random tokens of the
whole vocabulary did not form it in 4,000 steps: the copying map must be learned for
the tokens that occur), before pretraining proper.

The warm-up's copies sit side by side in rows of 256 tokens, and so does what pretraining
keeps of them; an episode asks for a name given hundreds of tokens earlier, at positions
pretraining never saw. The pretrained model copied a 12-token stretch at 0.59 of tokens
side by side at position 250; after the long-context phase, at 0.38 side by side near
position 1,800, and from 256 tokens back no better than it guessed a stretch written once
(`benchmarks/copy_distance.py`). `planted_rows` is the third kind, for the long-context
phase (`long_context.copy_share`): a window of one long document with stretches of it
written again further on, at any distance the window allows.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from composer_rl.stages.packing import PackedRows, pack_documents, rows_at_share
from composer_rl.tasks.invented import invented_name

if TYPE_CHECKING:
    from composer_rl.stages.config import LongContextPhaseConfig


def copy_document(rng: random.Random) -> str:
    """One document whose later names repeat earlier ones."""
    module, function, helper, param = (invented_name(rng) for _ in range(4))
    constant = invented_name(rng).upper()
    value = rng.randint(2, 99)
    operator = rng.choice(["+", "-", "*"])
    lines = [
        f"# {module}.py: `{function}({param})` returns {param} {operator} {constant}.",
        f"{constant} = {value}",
        "",
        "",
        f"def {helper}({param}):",
        f"    return {param}",
        "",
        "",
        f"def {function}({param}):",
        f"    return {helper}({param}) {operator} {constant}",
        "",
        f"# tests/test_{module}.py",
        f"from {module} import {function}, {constant}",
        "",
        "",
        f"def test_{function}():",
        f"    assert {function}(1) == 1 {operator} {constant}",
        "",
        f"# read {module}.py, then edit {function} in {module}.py",
    ]
    return "\n".join(lines) + "\n"


def copy_documents(count: int, seed: int) -> list[str]:
    """`count` documents, the same for the same seed on every machine."""
    rng = random.Random(seed)
    return [copy_document(rng) for _ in range(count)]


def repeated_stretches(
    documents: Sequence[Sequence[int]],
    count: int,
    min_tokens: int,
    max_tokens: int,
    seed: int,
) -> tuple[list[list[int]], list[list[bool]]]:
    """`count` stretches of `documents`, each written twice, and their loss masks.

    A stretch's length is drawn from [min_tokens, max_tokens]; its targets are the second
    copy's tokens after the first (which nothing in context predicts), so the loss pays only
    for finding the earlier occurrence of the current token and copying what followed it."""
    if min_tokens < 2 or max_tokens < min_tokens:
        raise ValueError(f"need 2 <= min_tokens <= max_tokens; got {min_tokens}, {max_tokens}")
    usable = [index for index, doc in enumerate(documents) if len(doc) >= max_tokens]
    if not usable:
        raise ValueError(f"no document holds {max_tokens} tokens to repeat")
    rng = random.Random(seed)
    pairs: list[list[int]] = []
    masks: list[list[bool]] = []
    for _ in range(count):
        doc = documents[rng.choice(usable)]
        length = rng.randint(min_tokens, max_tokens)
        start = rng.randrange(len(doc) - length + 1)
        stretch = list(doc[start : start + length])
        pairs.append(stretch + stretch)
        masks.append([False] * (length + 1) + [True] * (length - 1))
    return pairs, masks


def repeated_rows(
    documents: Sequence[Sequence[int]],
    seq_len: int,
    eos_id: int,
    count: int,
    min_tokens: int,
    max_tokens: int,
    seed: int,
) -> PackedRows:
    """`repeated_stretches` packed whole into rows of `seq_len` (a pair never spans two)."""
    pairs, masks = repeated_stretches(documents, count, min_tokens, max_tokens, seed)
    return pack_documents(pairs, seq_len, eos_id, masks=masks, split_documents=False)


def repeated_share(
    documents: Sequence[Sequence[int]],
    other_rows: int,
    share: float,
    seq_len: int,
    eos_id: int,
    min_tokens: int,
    max_tokens: int,
    seed: int,
) -> PackedRows:
    """Rows of repeated stretches that make `share` of all rows beside `other_rows` others:
    the warm-up's kind of data kept in pretraining (`copy_warmup.pretrain_share`), so the
    copying it formed is not washed out while the model learns the corpus."""
    if not 0 < share < 1:
        raise ValueError(f"share must lie in (0, 1); got {share}")
    wanted = max(1, round(other_rows * share / (1 - share)))
    most_per_row = max(1, seq_len // (2 * min_tokens + 1))  # so `wanted` rows are surely filled
    count = (wanted + 1) * most_per_row
    rows = repeated_rows(documents, seq_len, eos_id, count, min_tokens, max_tokens, seed)
    return PackedRows(
        tokens=rows.tokens[:wanted], mask=rows.mask[:wanted], boundaries=rows.boundaries[:wanted]
    )


def plant_copies(
    window: list[int], copies: int, min_tokens: int, max_tokens: int, rng: random.Random
) -> tuple[list[int], list[bool]]:
    """`window` with `copies` of its stretches written again later in it, over what stood
    there, and which of its tokens only copying predicts (each copy's tokens after its
    first); each copy's source lies wholly before it, and the copies do not overlap.

    Copies are written from the first to the last, so a later one never overwrites the
    source of an earlier one (that source ends before the earlier copy starts, which
    ends before the later one starts): every copy repeats text still in the row."""
    if min_tokens < 2 or max_tokens < min_tokens:
        raise ValueError(f"need 2 <= min_tokens <= max_tokens; got {min_tokens}, {max_tokens}")
    row = list(window)
    copied = [False] * len(row)
    lengths = [rng.randint(min_tokens, max_tokens) for _ in range(copies)]
    room = len(row) - sum(lengths) - max_tokens  # the first copy needs a source before it
    if room < copies:
        raise ValueError(f"a window of {len(row)} tokens cannot hold {copies} copies")
    # Gaps between copies, drawn as sorted cut points: the copies spread over the window.
    cuts = sorted(rng.sample(range(room), copies))
    start = max_tokens
    previous_cut = 0
    for length, cut in zip(lengths, cuts, strict=True):
        start += cut - previous_cut
        previous_cut = cut
        source = rng.randrange(start - length + 1)
        row[start : start + length] = row[source : source + length]
        copied[start + 1 : start + length] = [True] * (length - 1)
        start += length
    return row, copied


def planted_rows(
    documents: Sequence[Sequence[int]],
    seq_len: int,
    eos_id: int,
    count: int,
    copies: int,
    min_tokens: int,
    max_tokens: int,
    seed: int,
    loss_on: Literal["all", "copies"] = "all",
) -> PackedRows:
    """`count` rows, each a window of one document at least a row long with `copies`
    stretches written again further on (`plant_copies`). With `loss_on` "all" every token
    is a target, so the model learns the text and, where it repeats, to find the earlier
    occurrence at any distance in the row; with "copies" only the copies' tokens after
    their first are, as in the copy warm-up, so the whole gradient of these rows is
    copying's (on its own training rows the "all" kind was copied no better than the rest
    of the text after 400 steps: docs/rl/2026-12-05-distant-copy.md)."""
    usable = [doc for doc in documents if len(doc) >= seq_len - 1]
    if not usable:
        raise ValueError(f"no document holds {seq_len - 1} tokens to plant copies in")
    rng = random.Random(seed)
    windows: list[list[int]] = []
    masks: list[list[bool]] = []
    for _ in range(count):
        doc = rng.choice(usable)
        start = rng.randrange(len(doc) - (seq_len - 1) + 1)
        window, copied = plant_copies(
            list(doc[start : start + seq_len - 1]), copies, min_tokens, max_tokens, rng
        )
        windows.append(window)
        masks.append(copied if loss_on == "copies" else [True] * len(window))
    rows = pack_documents(windows, seq_len, eos_id, masks=masks, split_documents=False)
    if loss_on == "copies":
        rows.mask[:, -1] = False  # the end of text after the window: no copy
    return rows


def with_planted_rows(
    train: PackedRows,
    documents: Sequence[Sequence[int]],
    copying: LongContextPhaseConfig,
    share: float,
    eos_id: int,
    seed: int,
    loss_on: Literal["all", "copies"],
) -> PackedRows:
    """`train`'s rows and planted rows of its length, shaped by `copying`'s settings (the
    long-context phase's, which SFT's `copy_share` shares), making `share` of them all."""
    planted = planted_rows(
        documents,
        train.seq_len,
        eos_id,
        count=copying.copy_rows,
        copies=copying.copies_per_row,
        min_tokens=copying.copy_min_tokens,
        max_tokens=copying.copy_max_tokens,
        seed=seed,
        loss_on=loss_on,
    )
    return rows_at_share(train, planted, share)


__all__ = [
    "copy_document",
    "copy_documents",
    "plant_copies",
    "planted_rows",
    "repeated_rows",
    "repeated_share",
    "repeated_stretches",
    "with_planted_rows",
]
