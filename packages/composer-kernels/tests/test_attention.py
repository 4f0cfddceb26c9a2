"""Varlen attention equals a per-document reference loop, gradients included."""

from __future__ import annotations

import importlib
import itertools
import math

import pytest
import torch

from composer_kernels import attention

# The package re-exports the function under the module's name; fetch the module itself.
attention_module = importlib.import_module("composer_kernels.attention")

CU = [0, 7, 7, 20, 21, 40]  # an empty document and a one-token document included


def _reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: list[int], causal: bool, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain float64 softmax attention, one document at a time."""
    repeat = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for a, b in itertools.pairwise(cu):
        if b == a:
            continue
        qd = q[a:b].double().transpose(0, 1)
        kd = k[a:b].double().repeat_interleave(repeat, 1).transpose(0, 1)
        vd = v[a:b].double().repeat_interleave(repeat, 1).transpose(0, 1)
        s = qd @ kd.transpose(1, 2) * scale
        if causal:
            s = s.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), -math.inf)
        lses.append(torch.logsumexp(s, -1))
        outs.append((torch.softmax(s, -1) @ vd).transpose(0, 1))
    return torch.cat(outs), torch.cat(lses, dim=1)


def _qkv(heads: int = 4, kv_heads: int = 2, d: int = 16, dv: int = 8, seed: int = 0):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(CU[-1], heads, d, generator=gen, requires_grad=True)
    k = torch.randn(CU[-1], kv_heads, d, generator=gen, requires_grad=True)
    v = torch.randn(CU[-1], kv_heads, dv, generator=gen, requires_grad=True)
    return q, k, v


def _grads(
    out: torch.Tensor, tensors: tuple[torch.Tensor, ...], grad: torch.Tensor
) -> list[torch.Tensor]:
    return list(torch.autograd.grad(out, tensors, grad))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("long_path", [False, True], ids=["masked-sdpa", "per-document-sdpa"])
@pytest.mark.parametrize("padded_values", [False, True], ids=["unfused", "values-padded"])
def test_output_and_gradients_match_the_reference(
    causal: bool, long_path: bool, padded_values: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # v (8 wide) is narrower than q and k (16): padded to reach the fused CPU kernel, or not.
    monkeypatch.setattr(attention_module, "PAD_VALUES_MIN_TOKENS", 0 if padded_values else 10**9)
    if long_path:
        monkeypatch.setattr(attention_module, "MASKED_SDPA_MAX_TOKENS", 8)
    else:
        monkeypatch.setattr(attention_module, "PER_DOCUMENT_MAX_DOCS", 0)
    q, k, v = _qkv()
    cu = torch.tensor(CU, dtype=torch.int32)
    out = attention(q, k, v, cu_seqlens=cu, causal=causal, softmax_scale=0.3)
    ref, _ = _reference(q, k, v, CU, causal, 0.3)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (40, 4, 8)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    for ours, theirs in zip(
        _grads(out, (q, k, v), g), _grads(ref, (q, k, v), g.double()), strict=True
    ):
        torch.testing.assert_close(ours.double(), theirs.double(), atol=1e-5, rtol=1e-5)


def test_lse_matches_and_has_gradients() -> None:
    q, k, v = _qkv()
    cu = torch.tensor(CU)
    result = attention(q, k, v, cu_seqlens=cu, return_lse=True)
    assert isinstance(result, tuple)
    out, lse = result
    ref_out, ref_lse = _reference(q, k, v, CU, True, 0.25)
    assert lse.shape == (4, 40) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(lse)
    for ours, theirs in zip(
        _grads(lse, (q, k), g), _grads(ref_lse, (q, k), g.double()), strict=True
    ):
        torch.testing.assert_close(ours.double(), theirs.double(), atol=1e-5, rtol=1e-5)


def test_lse_merges_two_halves_of_the_keys_like_context_parallelism() -> None:
    """Attention over all keys = the lse-weighted merge of attention over two key halves."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 8, generator=gen)
    k = torch.randn(16, 2, 8, generator=gen)
    v = torch.randn(16, 2, 8, generator=gen)

    # One query against 16 keys, built as a non-causal document of 16 tokens where we read
    # row 0 (the query is placed at position 0 of a copy of k).
    def one_query(ks: torch.Tensor, vs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        qs = torch.cat([q, torch.zeros(ks.shape[0] - 1, 2, 8)])
        o, lse = attention(qs, ks, vs, causal=False, return_lse=True)  # type: ignore[misc]
        return o[0], lse[:, 0]

    full, _ = one_query(k, v)
    o1, l1 = one_query(k[:8], v[:8])
    o2, l2 = one_query(k[8:], v[8:])
    total = torch.logaddexp(l1, l2)
    merged = o1 * torch.exp(l1 - total)[:, None] + o2 * torch.exp(l2 - total)[:, None]
    torch.testing.assert_close(merged, full, atol=1e-5, rtol=1e-5)


def test_default_is_one_causal_document_and_bf16_works() -> None:
    q, k, v = (t.detach().bfloat16() for t in _qkv(kv_heads=4, dv=16))
    out = attention(q, k, v)
    ref, _ = _reference(q, k, v, [0, 40], True, 0.25)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_bad_inputs_are_clear_errors() -> None:
    q, k, v = (t.detach() for t in _qkv())
    with pytest.raises(ValueError, match="rise from 0"):
        attention(q, k, v, cu_seqlens=torch.tensor([0, 10, 30]))
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention(q, k[:, :1].expand(-1, 3, -1), v[:, :1].expand(-1, 3, -1))
    with pytest.raises(ValueError, match="packed"):
        attention(q[None], k, v)
    with pytest.raises(ValueError, match="integer"):
        attention(q, k, v, cu_seqlens=torch.tensor([0.0, 40.0]))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded_values", [False, True], ids=["unfused", "values-padded"])
def test_documents_of_one_length_go_through_one_batched_call(
    causal: bool, padded_values: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attention_module, "PAD_VALUES_MIN_TOKENS", 0 if padded_values else 10**9)
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", counting)
    cu = [0, 10, 20, 30, 40]  # a [4, 10] batch, packed
    q, k, v = _qkv()
    out = attention(q, k, v, cu_seqlens=torch.tensor(cu), causal=causal, softmax_scale=0.3)
    assert calls == [(4, 4, 10, 16)]  # [batch, heads, tokens, width]: one call for all four
    ref, _ = _reference(q, k, v, cu, causal, 0.3)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    for ours, theirs in zip(
        _grads(out, (q, k, v), g), _grads(ref, (q, k, v), g.double()), strict=True
    ):
        torch.testing.assert_close(ours.double(), theirs.double(), atol=1e-5, rtol=1e-5)
