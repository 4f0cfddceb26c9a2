"""The episode runner drives a real InferenceEngine against real sandboxes."""

from __future__ import annotations

import pytest
import torch

from composer_model import ComposerModel, InferenceEngine, preset, train_tokenizer
from composer_rl.agent.episode import EpisodeRunner, RunnerConfig, episode_view
from composer_rl.agent.oracle import play_oracle
from composer_rl.stages.config import OptimConfig, PhaseConfig
from composer_rl.stages.loop import train_phase
from composer_rl.stages.packing import pack_documents
from composer_rl.tasks import BUILTIN_TEMPLATES, Split

STOPS = {"finish", "no_call", "end_of_turn", "max_turns", "length", "context"}


def _setup(n_tasks: int = 2, layers: int = 2):  # type: ignore[no-untyped-def]
    tasks = [
        t for _, t in zip(range(n_tasks), BUILTIN_TEMPLATES[0].tasks(Split.TRAIN), strict=False)
    ]
    demos = [play_oracle(t, grade=False) for t in tasks]
    tokenizer = train_tokenizer([d.transcript.text for d in demos] * 4, vocab_size=400)
    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=layers))
    return tasks, demos, tokenizer, model


def test_untrained_model_episodes_are_recorded_and_graded() -> None:
    tasks, _, tokenizer, model = _setup()
    engine = InferenceEngine(model, tokenizer, max_batch_size=4, max_seq_len=512)
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=2, max_new_tokens=16))
    results = runner.run(tasks, samples_per_task=2)
    assert [(r.task.id, r.sample) for r in results] == [(t.id, s) for t in tasks for s in (0, 1)]
    for r in results:
        assert r.stop_reason in STOPS
        assert r.generated_tokens > 0
        assert r.report is not None and not r.solved  # random weights do not fix the bug
        assert set(r.task.files) <= set(r.files_after)
        view = episode_view(r, tokenizer)
        assert view.tokens.tool_call > 0
        assert view.test_results.failed + view.test_results.errors > 0


@pytest.mark.slow
def test_model_trained_on_a_demonstration_replays_it_and_solves() -> None:
    tasks, demos, tokenizer, model = _setup(n_tasks=1)
    ids, mask = demos[0].transcript.encode(tokenizer)
    rows = pack_documents(
        [ids], seq_len=len(ids) + 1, eos_id=tokenizer.eos_id, masks=[mask], split_documents=False
    )
    phase = PhaseConfig(
        name="overfit", steps=120, seq_len=len(ids) + 1, rows_per_step=1, eval_every=120,
        eval_rows=1, checkpoint_every=120, mtp_weight=0.0, optim=OptimConfig(lr=3e-3, warmup_steps=2, weight_decay=0.0),
    )  # fmt: skip
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        train_phase(model, phase, rows, rows, Path(tmp), show_progress=False)
    engine = InferenceEngine(model, tokenizer, max_batch_size=2, max_seq_len=1024)
    (result,) = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=4)).run(tasks)
    assert [c.name for c in result.calls] == ["read_file", "edit_file", "finish"], [
        (c.name, c.arguments, c.output[:80]) for c in result.calls
    ]
    assert result.finished and result.stop_reason == "finish"
    assert result.solved, result.report


def _tool_calling_model(tokenizer, model: ComposerModel) -> ComposerModel:  # type: ignore[no-untyped-def]
    """Weights that make greedy decoding write `<|tool_call|>NAME<|/tool_call|>` every turn.

    NAME is the first token of "list_files" (a call the sandbox answers with an error).

    Attention and feed-forward outputs are scaled down so each hidden state is mostly its
    token's embedding; four embeddings are made orthogonal to all others and the head maps
    each to the next token of the call (after `<|assistant|>` or `<|/tool_result|>`). The small
    rest of attention keeps the context in play, so the cache still matters.
    """
    special = tokenizer.special_ids
    (name,) = tokenizer.encode("list_files")[:1]
    chain = [
        (special["<|assistant|>"], special["<|tool_call|>"]),
        (special["<|/tool_result|>"], special["<|tool_call|>"]),
        (special["<|tool_call|>"], name),
        (name, special["<|/tool_call|>"]),
    ]
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.self_attn.o_proj.weight.mul_(0.01)
            for param in layer.mlp.parameters():
                param.mul_(0.01)
        model.embed_tokens.weight[:, :4] = 0.0
        model.lm_head.weight.zero_()
        for dim, token in enumerate(sorted({t for t, _ in chain})):
            model.embed_tokens.weight[token].zero_()
            model.embed_tokens.weight[token, dim] = 1.0
        keys = sorted({t for t, _ in chain})
        for source, target in chain:
            model.lm_head.weight[target, keys.index(source)] = 50.0
    return model


def test_cache_reuse_between_turns_changes_nothing_but_the_work() -> None:
    """Each episode continues its own cache; the turns are token for token a full re-send's."""
    tasks, _, tokenizer, model = _setup(n_tasks=2)
    model = _tool_calling_model(tokenizer, model)
    runs = {}
    for reuse in (False, True):
        engine = InferenceEngine(model, tokenizer, max_batch_size=2, max_seq_len=512)
        config = RunnerConfig(max_turns=3, max_new_tokens=8, reuse_cache=reuse)
        runs[reuse] = (EpisodeRunner(engine, tokenizer, config).run(tasks), engine)
    (before, plain), (after, reusing) = runs[False], runs[True]
    assert [len(r.calls) for r in after] == [3, 3]  # three turns per episode
    names = {c.name for r in after for c in r.calls}
    assert names == {tokenizer.decode(tokenizer.encode("list_files")[:1]).strip()}
    assert after[0].stop_reason == "max_turns"
    assert plain.stats.reused_tokens == 0
    # Turns 2 and 3 reused everything but the tool result (minus the last sampled token).
    assert reusing.stats.reused_tokens > reusing.stats.prompt_tokens // 2
    assert reusing.num_parked == 0  # every episode's session ended with the episode
    for a, b in zip(before, after, strict=True):
        assert a.transcript.text == b.transcript.text
        assert [(c.name, c.arguments, c.malformed) for c in a.calls] == [
            (c.name, c.arguments, c.malformed) for c in b.calls
        ]
        assert a.stop_reason == b.stop_reason and a.generated_tokens == b.generated_tokens


def test_a_call_without_its_opener_does_not_end_the_episode() -> None:
    """RL learned to end failing episodes by writing a call without `<|tool_call|>`, read as
    a message with no call (docs/rl/2026-12-06-rl-length-solved.md). It is a malformed call:
    the policy gets the error and its next turn."""
    from composer_rewards import ToolCall
    from composer_rl.agent.format import TOOL_CALL_END, render_call
    from composer_rl.eval.baseline_checkpoints import ScriptedEngine

    tasks, _, tokenizer, _ = _setup(n_tasks=1)
    broken = "run\n@@command\npython -m pytest -q\n" + TOOL_CALL_END
    finish = render_call(ToolCall(name="finish", arguments={"message": "Gave up."}))
    script = iter([broken, finish])
    engine = ScriptedEngine(tokenizer, script, max_batch_size=4, max_seq_len=4096)
    runner = EpisodeRunner(engine, tokenizer, RunnerConfig(max_turns=4, max_new_tokens=64))  # type: ignore[arg-type]
    (result,) = runner.run(tasks, samples_per_task=1)
    assert result.stop_reason == "finish" and next(script, None) is None
    first = result.calls[0]
    assert first.malformed and first.name == "run" and "<|tool_call|>" in (first.error or "")
    assert "malformed tool call" in result.transcript.text  # the policy was told
    view = episode_view(result, tokenizer)
    assert [c.malformed for c in view.tool_calls] == [True, False]
