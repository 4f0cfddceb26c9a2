"""Packing keeps document boundaries: positions restart, no target crosses a boundary."""

from __future__ import annotations

import itertools

import pytest
import torch

from composer_model import lr_at
from composer_model.losses import IGNORE, document_targets, target_ids
from composer_rl.stages.config import OptimConfig
from composer_rl.stages.packing import Batch, batch_rows, make_batch, pack_documents

EOS = 0


def masked_targets(batch: Batch) -> torch.Tensor:
    return target_ids(batch.input_ids, batch.cu_seqlens, 1, batch.mask)


def test_stream_packing_boundaries_and_positions() -> None:
    docs = [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]]
    packed = pack_documents(docs, seq_len=4, eos_id=EOS)
    # stream: 1 2 3 0 | 4 5 6 7 | 8 0 9 10 | 0 (ragged tail dropped)
    assert packed.tokens.tolist() == [[1, 2, 3, 0], [4, 5, 6, 7], [8, 0, 9, 10]]
    assert packed.boundaries == [[0, 4], [0, 4], [0, 2, 4]]
    batch = make_batch(packed, [2, 0])
    assert batch.input_ids.tolist() == [[8, 0, 9, 10, 1, 2, 3, 0]]
    assert batch.cu_seqlens.tolist() == [0, 2, 4, 8]
    assert batch.positions.tolist() == [[0, 1, 0, 1, 0, 1, 2, 3]]
    targets = masked_targets(batch)
    assert targets.tolist() == [0, IGNORE, 10, IGNORE, 2, 3, 0, IGNORE]


def test_sft_packing_pads_truncates_and_masks() -> None:
    docs = [[1, 2], [3, 4, 5], [6, 7, 8, 9, 10, 11]]
    masks = [[False, True], [False, False, True], [True] * 6]
    packed = pack_documents(docs, seq_len=5, eos_id=EOS, masks=masks, split_documents=False)
    assert packed.tokens.tolist() == [[1, 2, 0, 0, 0], [3, 4, 5, 0, 0], [6, 7, 8, 9, 10]]
    assert packed.mask.tolist()[0] == [False, True, True, False, False]
    assert packed.boundaries[0] == [0, 3, 5]
    batch = make_batch(packed, [0])
    targets = masked_targets(batch)
    # only the trained tokens (2 and its end-of-text) are targets
    assert targets.tolist() == [2, 0, IGNORE, IGNORE, IGNORE]


def test_batches_depend_only_on_seed_and_step() -> None:
    assert batch_rows(100, 4, step=7, seed=1) == batch_rows(100, 4, step=7, seed=1)
    assert batch_rows(100, 4, step=7, seed=1) != batch_rows(100, 4, step=8, seed=1)


def test_too_little_text_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no full row"):
        pack_documents([[1, 2]], seq_len=16, eos_id=EOS)


def test_document_targets_agree_with_model_helper() -> None:
    packed = pack_documents([[1, 2, 3, 4, 5, 6, 7]], seq_len=4, eos_id=EOS)
    batch = make_batch(packed, [0, 1])
    plain = document_targets(batch.input_ids.reshape(-1), batch.cu_seqlens, 1)
    assert torch.equal(masked_targets(batch), plain)


def test_warmup_then_cosine() -> None:
    optim = OptimConfig(lr=1.0, warmup_steps=4, min_lr_ratio=0.1)
    factors = [lr_at(s, 20, optim) for s in range(21)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert factors[4] == pytest.approx(1.0)
    assert factors[12] == pytest.approx(0.55)
    assert factors[20] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(factors[4:]))


def test_a_run_of_unknown_length_stays_at_the_peak_after_warm_up() -> None:
    optim = OptimConfig(lr=2.0, warmup_steps=2, min_lr_ratio=0.1)
    assert [lr_at(s, None, optim) for s in range(5)] == [1.0, 2.0, 2.0, 2.0, 2.0]


def test_a_batch_goes_to_the_device_asked_and_keeps_its_values() -> None:
    packed = pack_documents([[1, 2, 3], [4, 5, 6, 7, 8], [9, 10]], seq_len=4, eos_id=EOS)
    host = make_batch(packed, [2, 0])
    placed = make_batch(packed, [2, 0], torch.device("meta"))  # a device without data
    for name in ("input_ids", "positions", "cu_seqlens", "mask"):
        tensor, reference = getattr(placed, name), getattr(host, name)
        assert tensor.device.type == "meta", name
        assert (tensor.shape, tensor.dtype) == (reference.shape, reference.dtype), name
    assert host.input_ids.device.type == "cpu"  # no device: the rows' own (host memory)
