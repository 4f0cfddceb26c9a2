"""Rollouts as the trainer sees them: token records, versions across an in-flight update, and
the trainer's router-replayed log-probabilities against the engine's behaviour log-probabilities."""

from __future__ import annotations

import torch
from test_agent_episode import _setup as agent_setup

from composer_infra.checkpoint import Trajectory
from composer_model import InferenceEngine
from composer_rl.agent.episode import EpisodeResult, EpisodeRunner, RunnerConfig
from composer_rl.rl.batch import pack
from composer_rl.rl.loss import target_logprobs


def _setup(n_tasks: int = 2):  # type: ignore[no-untyped-def]
    tasks, _, tokenizer, model = agent_setup(n_tasks, layers=3)  # 2 MoE layers to replay
    return tasks, tokenizer, model


def _trajectory(result: EpisodeResult) -> Trajectory:
    record = result.record
    n = record.routed_prefix
    return Trajectory(
        tokens=record.tokens[:n],
        sampled=record.sampled[:n],
        logprobs=record.logprobs[:n],
        versions=record.versions[:n],
        routing=record.routing[:n],
        advantage=1.0,
    )


def test_record_is_the_context_token_in_token_out() -> None:
    tasks, tokenizer, model = _setup()
    engine = InferenceEngine(model, tokenizer, max_batch_size=4, max_seq_len=512)
    config = RunnerConfig(max_turns=3, max_new_tokens=12, temperature=1.0, record_routing=True)
    results = EpisodeRunner(engine, tokenizer, config).run(tasks, samples_per_task=2)
    for r in results:
        rec = r.record
        assert len(rec.tokens) == len(rec.sampled) == len(rec.logprobs) == len(rec.versions)
        assert sum(rec.sampled) == r.generated_tokens
        assert not rec.sampled[0]
        # The sampled tokens decode to exactly what the transcript says the model wrote.
        written = "".join(s.text for s in r.transcript.segments if s.kind == "tool_call")
        assert (
            tokenizer.decode([t for t, s in zip(rec.tokens, rec.sampled, strict=True) if s])
            == written
        )
        assert 0 < rec.routed_prefix <= len(rec.tokens)
        assert all(v == 0 for v, s in zip(rec.versions, rec.sampled, strict=True) if s)


def test_trainer_logprobs_with_router_replay_equal_the_engines() -> None:
    tasks, tokenizer, model = _setup()
    engine = InferenceEngine(model, tokenizer, max_batch_size=4, max_seq_len=512)
    config = RunnerConfig(max_turns=3, max_new_tokens=12, temperature=1.0, record_routing=True)
    results = EpisodeRunner(engine, tokenizer, config).run(tasks, samples_per_task=2)
    batch = pack([_trajectory(r) for r in results])
    with torch.no_grad():
        out = model(batch.input_ids, cu_seqlens=batch.cu_seqlens, replay_indices=batch.routing)
    logp = target_logprobs(out.logits, batch.input_ids, 1.0)
    sel = batch.target_mask
    assert int(sel.sum()) > 20
    torch.testing.assert_close(logp[sel], batch.behaviour_logp[sel], atol=2e-4, rtol=0)


def test_versions_change_mid_episode_after_an_in_flight_update() -> None:
    tasks, tokenizer, model = _setup(n_tasks=1)
    engine = InferenceEngine(model, tokenizer, max_batch_size=2, max_seq_len=512)
    config = RunnerConfig(max_turns=4, max_new_tokens=24, temperature=1.0)
    runner = EpisodeRunner(engine, tokenizer, config)
    runner.submit(tasks[0], 0)
    done: list[EpisodeResult] = []
    new_state = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
    steps = 0
    while runner.in_flight:
        done += runner.poll()
        steps += 1
        if steps == 6:  # mid-decode: the episode keeps its cache, later tokens get version 7
            engine.update_weights(new_state, version=7)
    (result,) = done
    versions = [v for v, s in zip(result.record.versions, result.record.sampled, strict=True) if s]
    assert versions[0] == 0 and versions[-1] == 7
    assert versions == sorted(versions)
    assert set(versions) == {0, 7}


def test_stream_returns_episodes_while_others_still_decode() -> None:
    tasks, tokenizer, model = _setup()
    engine = InferenceEngine(model, tokenizer, max_batch_size=4, max_seq_len=512)
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=1, max_new_tokens=4))
    runner.submit(tasks[0], 0, key="short")
    first: list[EpisodeResult] = []
    while not first:
        first = runner.poll()
        if not first and runner.in_flight == 1 and not runner._live:
            continue
    runner.submit(tasks[1], 0, key="later")
    rest: list[EpisodeResult] = []
    while runner.in_flight:
        rest += runner.poll()
    assert [r.key for r in first] == ["short"] and [r.key for r in rest] == ["later"]
    runner.close()
