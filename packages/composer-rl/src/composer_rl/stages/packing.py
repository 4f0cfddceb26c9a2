"""Packing documents into fixed-length rows with their boundaries.

Each row is `seq_len` tokens cut from the stream of documents (each ending with
<|endoftext|>); `cu_seqlens` marks where documents (or pieces of them) start and end inside
the row, positions restart at every boundary, and no loss crosses one. A step's batch is
several rows laid end to end as one packed sequence, the layout the model and the
attention kernel take.

An optional per-token loss mask rides along (SFT trains on the assistant's tokens only).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PackedRows:
    tokens: torch.Tensor  # [R, L] int64
    mask: torch.Tensor  # [R, L] bool: which tokens are targets
    boundaries: list[list[int]]  # per row, cumulative document ends (starting at 0)

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.tokens.shape[1])


@dataclass
class Batch:
    input_ids: torch.Tensor  # [1, R*L]
    positions: torch.Tensor  # [1, R*L]
    cu_seqlens: torch.Tensor  # [docs + 1] int32
    mask: torch.Tensor  # [1, R*L] bool

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.numel())


def pack_documents(
    documents: Sequence[Sequence[int]],
    seq_len: int,
    eos_id: int,
    masks: Sequence[Sequence[bool]] | None = None,
    split_documents: bool = True,
) -> PackedRows:
    """Pack token lists into rows of `seq_len`.

    With `split_documents` the stream is cut anywhere (pretraining); without it a document
    that does not fit in the current row starts the next one, the rest of the row is padding
    (masked out), and a document longer than a row is truncated (SFT).
    """
    rows: list[list[int]] = []
    row_masks: list[list[bool]] = []
    bounds: list[list[int]] = []
    cur: list[int] = []
    cur_mask: list[bool] = []
    cur_bounds: list[int] = [0]

    def flush(pad: bool) -> None:
        nonlocal cur, cur_mask, cur_bounds
        if not cur:
            return
        if pad and len(cur) < seq_len:
            fill = seq_len - len(cur)
            cur += [eos_id] * fill
            cur_mask += [False] * fill
            cur_bounds.append(seq_len)
        rows.append(cur)
        row_masks.append(cur_mask)
        bounds.append(cur_bounds)
        cur, cur_mask, cur_bounds = [], [], [0]

    for index, doc in enumerate(documents):
        ids = [*doc, eos_id]
        doc_mask = [*(masks[index] if masks is not None else [True] * len(doc)), True]
        if not split_documents:
            ids, doc_mask = ids[:seq_len], doc_mask[:seq_len]
            if len(cur) + len(ids) > seq_len:
                flush(pad=True)
            cur += ids
            cur_mask += doc_mask
            cur_bounds.append(len(cur))
            continue
        start = 0
        while start < len(ids):
            take = min(seq_len - len(cur), len(ids) - start)
            cur += ids[start : start + take]
            cur_mask += doc_mask[start : start + take]
            cur_bounds.append(len(cur))
            start += take
            if len(cur) == seq_len:
                flush(pad=False)
    flush(pad=not split_documents)
    if split_documents and rows and len(rows[-1]) < seq_len:
        rows.pop(), row_masks.pop(), bounds.pop()  # drop the ragged tail
    if not rows:
        raise ValueError(
            f"no full row of {seq_len} tokens could be packed; give more text or a shorter seq_len"
        )
    return PackedRows(
        tokens=torch.tensor(rows, dtype=torch.long),
        mask=torch.tensor(row_masks, dtype=torch.bool),
        boundaries=bounds,
    )


def concatenate(parts: Sequence[PackedRows]) -> PackedRows:
    """The rows of `parts` as one set (of one `seq_len`), so a step samples from all of them."""
    lengths = {part.seq_len for part in parts}
    if len(lengths) != 1:
        raise ValueError(f"rows of different lengths cannot be sampled together: {lengths}")
    return PackedRows(
        tokens=torch.cat([part.tokens for part in parts]),
        mask=torch.cat([part.mask for part in parts]),
        boundaries=[ends for part in parts for ends in part.boundaries],
    )


def rows_at_share(base: PackedRows, extra: PackedRows, share: float) -> PackedRows:
    """`base`'s rows and `extra`'s, `extra`'s repeated in turn (or cut) until they make
    `share` of all rows (share 1: `extra`'s alone), so a step's rows, drawn uniformly
    (`batch_rows`), come from `extra` with that probability."""
    if not 0 < share <= 1:
        raise ValueError(f"share must lie in (0, 1]; got {share}")
    if len(extra) == 0:
        raise ValueError("no rows to mix in")
    wanted = len(extra) if share == 1 else max(1, round(len(base) * share / (1 - share)))
    chosen = [i % len(extra) for i in range(wanted)]
    repeated = PackedRows(
        tokens=extra.tokens[chosen],
        mask=extra.mask[chosen],
        boundaries=[extra.boundaries[i] for i in chosen],
    )
    return repeated if share == 1 else concatenate([base, repeated])


def make_batch(
    packed: PackedRows, rows: Sequence[int], device: torch.device | None = None
) -> Batch:
    """Lay the chosen rows end to end as one packed sequence (on `device`, the model's:
    the rows stay in host memory, a step's batch alone goes to the GPU)."""
    seq_len = packed.seq_len
    cu: list[int] = [0]
    positions: list[torch.Tensor] = []
    for i, r in enumerate(rows):
        offset = i * seq_len
        ends = packed.boundaries[r]
        for a, b in itertools.pairwise(ends):
            cu.append(offset + b)
            positions.append(torch.arange(b - a))
    ids = packed.tokens[list(rows)].reshape(1, -1)
    return Batch(
        input_ids=ids.to(device),
        positions=torch.cat(positions).reshape(1, -1).to(device),
        cu_seqlens=torch.tensor(cu, dtype=torch.int32, device=device),
        mask=packed.mask[list(rows)].reshape(1, -1).to(device),
    )


def batch_rows(num_rows: int, rows_per_step: int, step: int, seed: int) -> list[int]:
    """The rows of step `step`: a function of (seed, step) only, so a resumed run sees the
    same batches as an uninterrupted one."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, num_rows, (rows_per_step,), generator=generator).tolist()
