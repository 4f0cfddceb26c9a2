"""The studies of the report's claims, in the order `composer-rl study --list` shows.

A study whose code is not written yet stays listed with its claim, so the list is the plan;
running it says so and exits non-zero instead of printing a result nobody measured.
"""

from __future__ import annotations

from composer_rl.studies import (
    async_rl,
    behaviour_reward,
    cpt_vs_rl,
    kl_estimators,
    length_penalty,
    nvfp4_invariance,
    router_replay,
    self_summary,
)
from composer_rl.studies.base import Study

STUDIES: dict[str, Study] = {
    s.name: s
    for s in (
        Study(
            "cpt-vs-rl",
            "Cross-entropy after continued pretraining predicts the downstream RL reward "
            "(log-linear).",
            "Composer 2 report, stage one",
            cpt_vs_rl.run,
        ),
        Study(
            "self-summary",
            "Self-summarization trained with the episode's final reward on every generation "
            "of the chain cuts compaction error (about 50%) against a long compaction prompt.",
            "Composer 2 report and Cursor's self-summarization post",
            self_summary.run,
        ),
        Study(
            "length-penalty",
            "The concave length penalty C(x) = ((1 + kx)^(1-q) - 1) / (k(1-q)) makes easy tasks "
            "finish fast without hurting the solve rate.",
            "Composer 2 report, rewards and behaviour",
            length_penalty.run,
        ),
        Study(
            "kl-estimators",
            "Use the k1 estimator (log pi - log pi_ref) for the KL penalty, not k3 "
            "((r - 1) - log r, r = pi_ref / pi): k3's variance explodes as the policies diverge.",
            "Composer 2 report, RL algorithm",
            kl_estimators.run,
        ),
        Study(
            "router-replay",
            "Replaying the inference engine's expert choices in the trainer's forward cuts the "
            "train/inference logprob mismatch; the plausibility guard cuts its p99 further.",
            "Composer 2 report, infrastructure",
            router_replay.run,
        ),
        Study(
            "nvfp4-invariance",
            "NVFP4 with a per-token second-level scale makes a token's quantized bits (and the "
            "model's logprobs) independent of the rest of the batch; a per-tensor scale does not.",
            "Composer 2 report, infrastructure (MoE forward)",
            nvfp4_invariance.run,
        ),
        Study(
            "async",
            "Fully asynchronous RL with in-flight weight updates keeps off-policy lag low and "
            "trains as well as synchronous RL per sample, at higher throughput.",
            "Composer 2 report, RL algorithm and infrastructure",
            async_rl.run,
        ),
        Study(
            "behaviour-reward",
            "A behaviour a monitor flags falls on new episodes once a reward against it is "
            "added to the running job (composer-rl plugins add), beyond its noise.",
            "Composer 2 report, rewards and behaviour",
            behaviour_reward.run,
        ),
    )
}


def get_study(name: str) -> Study:
    """The study called `name`; KeyError naming the known ones otherwise."""
    try:
        return STUDIES[name]
    except KeyError:
        raise KeyError(f"unknown study {name!r}; known: {', '.join(STUDIES)}") from None
