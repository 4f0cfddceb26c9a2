"""A continuous-batching inference engine over ComposerModel, built for on-policy RL.

Each `step()` admits waiting requests into free cache slots (up to `max_batch_size`), runs
one prefill forward for the newcomers and one decode forward for everyone else, samples a
token per sequence, and retires the sequences that finished. Every generated token carries
its log-probability under the sampling distribution and the policy version that produced
it; with `return_routing`, every processed token also carries the experts each MoE layer
chose for it, so the trainer can replay them.

`update_weights(state, version)` swaps the weights in place between two steps. Sequences in
flight keep their caches (computed under the old weights, as in PipelineRL) and the tokens
sampled after the swap are stamped with the new version.

Multi-turn sessions: a request given `session=key` leaves its cache slot parked under that key
when it finishes, and the next request of the same session reuses the cached latents of the
longest common prefix of the two token lists (an agent turn is the previous turn's prompt and
output plus the tool result: only the tool result and later tokens are computed). Parked
slots are lent to other requests (least recently used first) when the engine runs out, and
dropped by `update_weights`, so a parked cache never mixes weight versions: what a request
computes is what a fresh prefill under the current weights computes, token for token.

With `speculative=True` the first MTP module drafts one token per step and the main model
verifies it in the same forward that extends the sequence. Greedy output is identical to plain
greedy decoding; sampled output follows the same distribution (speculative sampling), and every
token's log-probability is still under the main model's sampling distribution.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from composer_model.engine.cache import LatentKVCache
from composer_model.engine.captured import CapturedDecode
from composer_model.engine.sampling import SamplingParams, sample, sampling_logprobs
from composer_model.model import ComposerModel
from composer_model.tokenizer import ComposerTokenizer

FinishReason = Literal["stop_token", "stop_string", "length"]


@dataclass
class GenerationResult:
    request_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    logprobs: list[float]  # per generated token, under the sampling distribution
    versions: list[int]  # per generated token, the policy version that sampled it
    finish_reason: FinishReason
    # [len(prompt_ids) + len(token_ids), num_moe_layers, top_k] when requested, else None.
    routing: torch.Tensor | None = None


@dataclass
class _Sequence:
    request_id: str
    params: SamplingParams
    prompt_ids: list[int]
    generator: torch.Generator
    session: str | None = None
    slot: int = -1
    tokens: list[int] = field(default_factory=list)
    cached: int = 0
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    routing: list[torch.Tensor] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_text_end: int | None = None
    # Speculative decoding state.
    draft: int | None = None
    mtp_cached: int = 0
    pending_hidden: torch.Tensor | None = None  # main hidden states not yet fed to the MTP module
    draft_logprobs: torch.Tensor | None = None  # the MTP head's sampling distribution for the draft

    def pend(self, hidden: torch.Tensor) -> None:
        """Queue main hidden states of newly cached positions for the MTP module."""
        if self.pending_hidden is None or self.pending_hidden.shape[0] == 0:
            self.pending_hidden = hidden
        else:
            self.pending_hidden = torch.cat([self.pending_hidden, hidden])

    @property
    def generated(self) -> list[int]:
        return self.tokens[len(self.prompt_ids) :]


@dataclass
class EngineStats:
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    prompt_tokens: int = 0  # prompt tokens of every admitted request
    reused_tokens: int = 0  # of those, served from a parked session cache (not recomputed)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


class InferenceEngine:
    def __init__(
        self,
        model: ComposerModel,
        tokenizer: ComposerTokenizer | None = None,
        max_batch_size: int = 16,
        max_seq_len: int | None = None,
        version: int = 0,
        speculative: bool = False,
        compile_decode: bool = False,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = model.config
        self.max_batch_size = max_batch_size
        self.max_seq_len = min(
            max_seq_len or self.config.max_position_embeddings, self.config.max_position_embeddings
        )
        self.version = version
        self.speculative = speculative
        if speculative and not model.mtp_modules:
            raise ValueError(
                "speculative=True needs a model with MTP modules (num_nextn_predict_layers >= 1)"
            )
        param = next(model.parameters())
        self.device = param.device
        width = self.config.cache_width
        self.cache = LatentKVCache(
            self.config.num_hidden_layers,
            width,
            max_batch_size,
            param.dtype,
            self.device,
            max_capacity=self.max_seq_len,
        )
        self.mtp_cache = LatentKVCache(
            1,
            width,
            max_batch_size,
            param.dtype,
            self.device,
            layer_offset=self.config.num_hidden_layers,
            max_capacity=self.max_seq_len,
        )
        # The one-new-token step compiled (CPU and GPU); prefill and verification stay eager.
        self.captured = CapturedDecode(model) if compile_decode else None
        self.stats = EngineStats()
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        # Finished session requests whose cache slots are kept, least recently used first.
        self._parked: OrderedDict[str, _Sequence] = OrderedDict()
        self._ids = itertools.count()
        self._seed_source = torch.Generator().manual_seed(0)
        self._lock = threading.RLock()
        self._default_stops: list[int] = []
        if tokenizer is not None:
            self._default_stops = [
                i
                for t, i in tokenizer.special_ids.items()
                if t in {"<|endoftext|>", "<|end_of_turn|>"}
            ]
        elif self.config.eos_token_id is not None:
            eos = self.config.eos_token_id
            self._default_stops = list(eos) if isinstance(eos, list) else [eos]

    # --- requests -----------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        session: str | None = None,
    ) -> str:
        """Queue a request; returns its id.

        `session`: an opaque key (e.g. an episode id) under which the request's cache stays
        parked when it finishes, for the next request with the same key to continue from.
        Call `end_session` when the session is over (parked slots are also lent out on
        demand, so a forgotten session costs nothing but a later prefill).
        """
        params = params or SamplingParams()
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    "a text prompt needs a tokenizer; pass token ids or give the engine a tokenizer"
                )
            prompt_ids = self.tokenizer.encode(prompt)
        else:
            prompt_ids = [int(t) for t in prompt]
        if not prompt_ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(prompt_ids) >= self.max_seq_len:
            raise ValueError(
                f"prompt has {len(prompt_ids)} tokens; this engine holds at most {self.max_seq_len - 1}"
            )
        if max(prompt_ids) >= self.config.vocab_size or min(prompt_ids) < 0:
            raise ValueError(f"prompt token ids must be in [0, {self.config.vocab_size})")
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings need a tokenizer")
        seed = (
            params.seed
            if params.seed is not None
            else int(torch.randint(0, 2**62, (1,), generator=self._seed_source))
        )
        request_id = request_id or f"req-{next(self._ids)}"
        seq = _Sequence(
            request_id,
            params,
            prompt_ids,
            torch.Generator().manual_seed(seed),
            session=session,
            tokens=list(prompt_ids),
        )
        with self._lock:
            if session is not None and any(
                s.session == session for s in itertools.chain(self._waiting, self._running)
            ):
                raise ValueError(
                    f"session {session!r} already has a request in flight; wait for its result "
                    "before sending the next turn"
                )
            self._waiting.append(seq)
        return request_id

    def end_session(self, session: str) -> bool:
        """Free a session's parked cache slot; False if nothing was parked under `session`."""
        with self._lock:
            seq = self._parked.pop(session, None)
            if seq is None:
                return False
            self._free_slot(seq.slot)
            return True

    @property
    def num_parked(self) -> int:
        return len(self._parked)

    def has_unfinished(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[GenerationResult]:
        """Run requests to completion; results in the order of `prompts`."""
        per_prompt = list(params) if isinstance(params, Sequence) else [params] * len(prompts)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, per_prompt, strict=True)]
        done: dict[str, GenerationResult] = {}
        while self.has_unfinished():
            for result in self.step():
                done[result.request_id] = result
        return [done[i] for i in ids]

    # --- weights ------------------------------------------------------------------------

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load new weights in place between steps; caches are kept, later tokens get `version`.

        A partial state dict (only the tensors that changed) is fine. Names and shapes are all
        checked before anything is copied, so a bad update leaves the old weights intact.
        """
        with self._lock:
            current = self.model.state_dict()
            unknown = sorted(set(state_dict) - set(current))
            if unknown:
                raise KeyError(f"update_weights got unknown tensors: {unknown[:8]}")
            wrong = [
                f"{k}: {tuple(v.shape)} != {tuple(current[k].shape)}"
                for k, v in state_dict.items()
                if v.shape != current[k].shape
            ]
            if wrong:
                raise ValueError(f"update_weights got tensors of the wrong shape: {wrong[:8]}")
            with torch.no_grad():
                for key, value in state_dict.items():
                    current[key].copy_(value)
            self.version = version
            # Parked caches hold latents of the old weights; the next turn recomputes them.
            while self._parked:
                self._free_slot(self._parked.popitem(last=False)[1].slot)

    def abort(self, request_id: str) -> bool:
        """Drop a waiting or running request (its slot is freed); False if it is unknown."""
        with self._lock:
            for seq in self._waiting:
                if seq.request_id == request_id:
                    self._waiting.remove(seq)
                    return True
            for seq in self._running:
                if seq.request_id == request_id:
                    self._running.remove(seq)
                    self._free_slot(seq.slot)
                    return True
            return False

    # --- slots and sessions -------------------------------------------------------------

    def _free_slot(self, slot: int) -> None:
        self.cache.free(slot)
        self.mtp_cache.free(slot)

    def _allocate_slot(self) -> int:
        if not self.cache._free and self._parked:
            self._free_slot(self._parked.popitem(last=False)[1].slot)  # lend the oldest
        slot = self.cache.allocate()
        if self.mtp_cache.allocate() != slot:
            raise RuntimeError("main and MTP cache slots diverged")
        return slot

    def _admit(self, seq: _Sequence) -> None:
        """Give `seq` a slot: its session's parked one (reusing the common prefix) or a free one."""
        self.stats.prompt_tokens += len(seq.prompt_ids)
        old = self._parked.pop(seq.session, None) if seq.session is not None else None
        if old is None:
            seq.slot = self._allocate_slot()
            return
        seq.slot = old.slot
        prompt = seq.prompt_ids
        common = 0
        for a, b in zip(old.tokens, prompt, strict=False):
            if a != b:
                break
            common += 1
        # At least one prompt token is computed: its logits give the first new token.
        reuse = min(common, old.cached, len(prompt) - 1)
        if seq.params.return_routing and not old.params.return_routing:
            reuse = 0  # the parked request kept no expert indices for its tokens
        mtp_keep = 0
        pending: torch.Tensor | None = None
        if self.speculative and reuse > 0:
            # MTP entry t was computed from token t+1: valid while t+1 is still shared.
            mtp_keep = max(0, min(old.mtp_cached, common - 1, reuse))
            if mtp_keep == old.mtp_cached:
                if old.pending_hidden is not None:
                    pending = old.pending_hidden[: reuse - mtp_keep]
            else:  # the hidden states between mtp_keep and reuse were consumed: recompute them
                reuse = mtp_keep
        self.cache.truncate(seq.slot, reuse)
        self.mtp_cache.truncate(seq.slot, mtp_keep)
        seq.cached = reuse
        seq.mtp_cached = mtp_keep
        seq.pending_hidden = pending if pending is not None and pending.shape[0] else None
        if seq.params.return_routing and reuse:
            seq.routing = [torch.cat(old.routing)[:reuse]]
        self.stats.reused_tokens += reuse

    # --- stepping -----------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[GenerationResult]:
        """Admit, prefill, decode one token for every running sequence; return finished ones."""
        with self._lock:
            self.stats.steps += 1
            while self._waiting and len(self._running) < self.max_batch_size:
                seq = self._waiting.popleft()
                self._admit(seq)
                self._running.append(seq)
            # Prefill: every request that has not sampled yet (a session's continuation
            # included: it feeds only what its parked cache lacks).
            prefill = [s for s in self._running if not s.generated]
            decode = [s for s in self._running if s.generated]
            if prefill:
                self._advance(prefill)
            if decode:
                if self.speculative:
                    self._speculate(decode)
                else:
                    self._advance(decode)
            finished = [s for s in self._running if s.finish_reason is not None]
            flush = [s for s in finished if s.params.return_routing and s.cached < len(s.tokens)]
            if flush:
                _, hidden, _ = self._forward(flush)  # routing for the last token, nothing sampled
                if self.speculative:
                    for row, seq in enumerate(flush):
                        seq.pend(hidden[row, :1])
            results = []
            for seq in finished:
                self._running.remove(seq)
                if seq.session is not None:
                    self._parked[seq.session] = seq
                else:
                    self._free_slot(seq.slot)
                results.append(self._result(seq))
            return results

    def _forward(
        self, seqs: list[_Sequence], extra: list[list[int]] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Feed each sequence's uncached tokens (plus `extra` drafts) through the main model."""
        chunks = [s.tokens[s.cached :] + (extra[i] if extra else []) for i, s in enumerate(seqs)]
        n = max(len(c) for c in chunks)
        ids = torch.zeros(len(seqs), n, dtype=torch.long)
        for row, chunk in enumerate(chunks):
            ids[row, : len(chunk)] = torch.tensor(chunk)
        new_lengths = torch.tensor([len(c) for c in chunks])
        past = torch.tensor([s.cached for s in seqs])
        positions = past[:, None] + torch.arange(n)[None, :]
        slots = torch.tensor([s.slot for s in seqs], device=self.device)
        ids, positions, new_lengths = (
            ids.to(self.device),
            positions.to(self.device),
            new_lengths.to(self.device),
        )
        want_routing = any(s.params.return_routing for s in seqs)
        captured = None
        if self.captured is not None and n == 1:
            longest = int(past.max())
            self.cache.reserve(longest + 1)
            captured = self.captured(
                ids[:, 0], slots, past.to(self.device), longest, self.cache.buffers
            )
        if captured is not None:
            logits, hidden, indices = captured
        else:
            view = self.cache.view(slots, new_lengths)
            logits, hidden, routing = self.model.forward_cached(
                ids, positions, new_lengths, view, return_routing=want_routing
            )
            indices = [r.indices for r in routing]
        self.cache.advance(slots, new_lengths)
        for row, seq in enumerate(seqs):
            seq.cached += int(new_lengths[row])
            if seq.params.return_routing:
                self._record_routing(seq, indices, row, n, int(new_lengths[row]))
        return logits, hidden, new_lengths

    def _record_routing(
        self, seq: _Sequence, indices: list[torch.Tensor], row: int, n: int, count: int
    ) -> None:
        per_layer = [i.view(-1, n, i.shape[-1])[row, :count] for i in indices]
        seq.routing.append(torch.stack(per_layer, dim=1).to(torch.int16).cpu())

    def _advance(self, seqs: list[_Sequence]) -> None:
        logits, hidden, new_lengths = self._forward(seqs)
        lasts = new_lengths - 1
        greedy = [row for row, s in enumerate(seqs) if s.params.temperature == 0.0]
        picked: dict[int, tuple[int, float]] = {}
        if greedy:
            # One log-softmax and argmax for every greedy row (the same rule as `sample`).
            rows = torch.tensor(greedy, device=logits.device)
            last = logits[rows, lasts[rows]]
            logprobs = torch.log_softmax(
                last.to(torch.promote_types(last.dtype, torch.float32)), dim=-1
            )
            tokens = logprobs.argmax(-1)
            values = logprobs.gather(1, tokens[:, None])[:, 0]
            for row, token, value in zip(greedy, tokens.tolist(), values.tolist(), strict=True):
                picked[row] = (int(token), float(value))
        for row, seq in enumerate(seqs):
            last_row = int(lasts[row])
            if row in picked:
                token, logprob = picked[row]
            else:
                token, logprob = sample(logits[row, last_row], seq.params, seq.generator)
            self._append(seq, token, logprob)
            if self.speculative:
                seq.pend(hidden[row, : last_row + 1])
        if self.speculative:
            self._draft([s for s in seqs if s.finish_reason is None])

    def _append(self, seq: _Sequence, token: int, logprob: float) -> None:
        seq.tokens.append(token)
        seq.logprobs.append(logprob)
        seq.versions.append(self.version)
        params = seq.params
        stops = params.stop_token_ids if params.stop_token_ids is not None else self._default_stops
        if token in stops:
            seq.finish_reason = "stop_token"
        elif params.stop and self.tokenizer is not None:
            text = self.tokenizer.decode(seq.generated)
            hits = [text.find(s) for s in params.stop if s in text]
            if hits:
                seq.finish_reason = "stop_string"
                seq.stop_text_end = min(hits)
        if seq.finish_reason is None and (
            len(seq.generated) >= params.max_new_tokens or len(seq.tokens) >= self.max_seq_len
        ):
            seq.finish_reason = "length"

    # --- speculative decoding (greedy, one MTP draft token per step) -----------------------

    def _draft(self, seqs: list[_Sequence]) -> None:
        """Feed newly verified positions to the MTP module; its last output is the next draft.

        MTP input at position t is (main hidden h_t, embedding of token t+1); it predicts t+2.
        """
        if not seqs:
            return
        module = self.model.mtp_modules[0]
        chunks = []
        for seq in seqs:
            assert seq.pending_hidden is not None
            start = seq.mtp_cached
            count = seq.pending_hidden.shape[0]
            chunks.append((seq.pending_hidden, seq.tokens[start + 1 : start + 1 + count]))
        n = max(h.shape[0] for h, _ in chunks)
        hidden = torch.zeros(
            len(seqs), n, self.config.hidden_size, dtype=chunks[0][0].dtype, device=self.device
        )
        ids = torch.zeros(len(seqs), n, dtype=torch.long, device=self.device)
        for row, (h, toks) in enumerate(chunks):
            hidden[row, : h.shape[0]] = h
            ids[row, : len(toks)] = torch.tensor(toks, device=self.device)
        new_lengths = torch.tensor([h.shape[0] for h, _ in chunks], device=self.device)
        past = torch.tensor([s.mtp_cached for s in seqs], device=self.device)
        positions = past[:, None] + torch.arange(n, device=self.device)[None, :]
        slots = torch.tensor([s.slot for s in seqs], device=self.device)
        cos, sin = self.model.rotary(positions)
        view = self.mtp_cache.view(slots, new_lengths)
        out = module(
            hidden, self.model.embed_tokens(ids), cos, sin, cache=view, new_lengths=new_lengths
        )
        self.mtp_cache.advance(slots, new_lengths)
        logits = self.model.lm_head(module.shared_head.norm(out))
        for row, seq in enumerate(seqs):
            count = int(new_lengths[row])
            seq.mtp_cached += count
            seq.pending_hidden = None
            if seq.params.temperature == 0.0:
                seq.draft = int(logits[row, count - 1].argmax())
            else:
                seq.draft_logprobs = sampling_logprobs(logits[row, count - 1].cpu(), seq.params)
                seq.draft = int(
                    torch.multinomial(seq.draft_logprobs.exp(), 1, generator=seq.generator)
                )

    def _verify(self, seq: _Sequence, logits: torch.Tensor, draft: int) -> tuple[int, float, bool]:
        """Accept or replace the draft so that the emitted token is distributed exactly as `sample`.

        Greedy: accept iff the draft is the argmax. Sampling (speculative sampling, Leviathan et
        al. / Chen et al.): accept with probability min(1, p(d)/q(d)), otherwise draw from the
        normalised residual max(0, p - q). Either way the token's reported log-probability is
        under p, the main model's sampling distribution: the behaviour policy RL needs.
        """
        params = seq.params
        target = sampling_logprobs(logits.cpu(), params)
        if params.temperature == 0.0:
            token = int(target.argmax())
            return token, float(target[token]), token == draft
        proposal = seq.draft_logprobs
        assert proposal is not None
        ratio = float((target[draft] - proposal[draft]).exp())
        if float(torch.rand((), generator=seq.generator)) < ratio:
            return draft, float(target[draft]), True
        residual = (target.exp() - proposal.exp()).clamp(min=0.0)
        if float(residual.sum()) <= 0.0:
            residual = target.exp()
        token = int(torch.multinomial(residual, 1, generator=seq.generator))
        return token, float(target[token]), False

    def _speculate(self, seqs: list[_Sequence]) -> None:
        drafts = [[s.draft] if s.draft is not None else [] for s in seqs]
        logits, hidden, new_lengths = self._forward(seqs, extra=drafts)
        keep: list[_Sequence] = []
        before = [s.cached - int(new_lengths[row]) for row, s in enumerate(seqs)]
        for row, seq in enumerate(seqs):
            fed = int(new_lengths[row])  # 1 uncached token + the draft
            first = fed - 1 - len(drafts[row])  # row position predicting the draft's slot
            verified = first + 1  # positions whose hidden states are final
            if drafts[row]:
                token, logprob, accepted = self._verify(seq, logits[row, first], drafts[row][0])
                self.stats.drafted += 1
                self.stats.accepted += int(accepted)
            else:
                token, logprob = sample(logits[row, first], seq.params, seq.generator)
                accepted = False
            self._append(seq, token, logprob)
            if accepted and seq.finish_reason is None:
                bonus, bonus_logprob = sample(logits[row, first + 1], seq.params, seq.generator)
                self._append(seq, bonus, bonus_logprob)
                verified += 1
            else:
                # The draft's cache entry (and routing) was computed for a rejected token.
                self.cache.truncate(seq.slot, seq.cached - len(drafts[row]))
                seq.cached -= len(drafts[row])
                if seq.params.return_routing and drafts[row]:
                    seq.routing[-1] = seq.routing[-1][:-1]
            seq.draft = None
            # Hidden states of every position that stays cached (a parked session resumes
            # its MTP cache from them), final for all of them.
            seq.pend(hidden[row, : seq.cached - before[row]])
            if seq.finish_reason is None:
                assert seq.cached - before[row] == verified
                keep.append(seq)
        self._draft(keep)

    # --- results ------------------------------------------------------------------------

    def _result(self, seq: _Sequence) -> GenerationResult:
        assert seq.finish_reason is not None
        generated = seq.generated
        text = self.tokenizer.decode(generated) if self.tokenizer is not None else ""
        if seq.stop_text_end is not None:
            text = text[: seq.stop_text_end]
        routing = torch.cat(seq.routing) if seq.params.return_routing and seq.routing else None
        return GenerationResult(
            request_id=seq.request_id,
            prompt_ids=seq.prompt_ids,
            token_ids=generated,
            text=text,
            logprobs=seq.logprobs,
            versions=seq.versions,
            finish_reason=seq.finish_reason,
            routing=routing,
        )


__all__ = ["EngineStats", "GenerationResult", "InferenceEngine"]
