"""Self-summarization: a model taught by the summarized demonstrations summarizes when asked,
continues from the condensed context, and every segment shares the episode's reward."""

from __future__ import annotations

import pytest
import torch

from composer_model import (
    ComposerModel,
    InferenceEngine,
    OptimConfig,
    build_optimizer,
    compute_loss,
    preset,
    train_step,
    train_tokenizer,
)
from composer_rewards import score_episode
from composer_rl.agent.episode import EpisodeRunner, RunnerConfig
from composer_rl.agent.oracle import oracle_summary, summary_demonstration
from composer_rl.plugins import build_plugin_manager
from composer_rl.rl.episodes import score_result
from composer_rl.rl.orchestrator import assign_advantages
from composer_rl.rl.summarize import SummaryConfig, condensed_prompt, should_summarize
from composer_rl.stages.packing import make_batch, pack_documents
from composer_rl.tasks import BUILTIN_TEMPLATES, Split


def test_trigger_and_condensed_context() -> None:
    config = SummaryConfig(context_budget=100, summary_tokens=10, max_summaries=2)
    assert not should_summarize(50, 40, 0, config)
    assert should_summarize(70, 40, 0, config)
    assert not should_summarize(70, 40, 2, config)  # none left
    assert not should_summarize(10_000, 40, 0, None)
    text = condensed_prompt("Fix combine.", "Read a.py.", 2)
    assert "Fix combine." in text and "Read a.py." in text and "summary 2" in text
    with pytest.raises(ValueError, match="summary_tokens"):
        SummaryConfig(context_budget=10, summary_tokens=20)


@pytest.mark.slow
def test_taught_model_summarizes_continues_and_segments_share_the_reward() -> None:
    task = next(iter(BUILTIN_TEMPLATES[0].tasks(Split.TRAIN)))
    first, second = summary_demonstration(task)
    tokenizer = train_tokenizer([first.text, second.text] * 8, vocab_size=400)
    torch.manual_seed(0)
    model = ComposerModel(preset("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=2))
    encoded = [t.encode(tokenizer) for t in (first, second)]
    seq_len = max(len(ids) for ids, _ in encoded) + 1
    rows = pack_documents(
        [ids for ids, _ in encoded],
        seq_len=seq_len,
        eos_id=tokenizer.eos_id,
        masks=[mask for _, mask in encoded],
        split_documents=False,
    )
    batch = make_batch(rows, list(range(len(rows))))
    optim = OptimConfig(lr=3e-3, warmup_steps=2, weight_decay=0.0)
    optimizer = build_optimizer(model, optim)
    # Train until the demonstrations are memorised, not for a fixed count: at this
    # learning rate the loss curve is chaotic, and another CPU's float rounding took a fixed
    # 80 steps to a point where greedy decoding dropped a line of the summary (CI).
    loss = float("inf")
    for _ in range(400):
        if loss < 2e-4:
            break
        loss = train_step(
            model,
            optimizer,
            lambda: compute_loss(
                model,
                batch.input_ids,
                positions=batch.positions,
                cu_seqlens=batch.cu_seqlens,
                mtp_weight=0.0,
                loss_mask=batch.mask,
            ),
            grad_clip=1.0,
        ).loss
    assert loss < 2e-4, f"the demonstrations were not memorised (loss {loss:.2e})"
    # The trigger fires right after the first tool result, as in the demonstration.
    prompt_len = len(tokenizer.encode(first.segments[0].text))
    summary = SummaryConfig(context_budget=prompt_len + 60, summary_tokens=64, max_summaries=1)
    config = RunnerConfig(max_turns=4, max_new_tokens=48, summary=summary)
    engine = InferenceEngine(model, tokenizer, max_batch_size=2, max_seq_len=1024)
    (result,) = EpisodeRunner(engine, tokenizer, config).run([task])
    assert result.summaries == [oracle_summary(task)]
    assert len(result.records) == 2
    assert result.solved, result.transcript.text
    pm = build_plugin_manager()
    scored = score_result(result, lambda episode: score_episode(pm, episode), tokenizer)
    assert [t.segment for t in scored.trajectories] == [0, 1]
    other = score_result(result, lambda episode: score_episode(pm, episode), tokenizer)
    other.reward = (scored.reward or 0.0) - 1.0
    trajs, _ = assign_advantages([scored, other])
    mine = [t for t in trajs if any(t is s for s in scored.trajectories)]
    assert len(mine) == 2
    assert len({t.reward for t in mine}) == 1 and mine[0].reward == scored.reward
    assert len({t.advantage for t in mine}) == 1 and mine[0].advantage == pytest.approx(0.5)
