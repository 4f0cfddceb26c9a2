"""The asynchronous RL loop.

Imported by module, not from here (the agent imports `summarize` without pulling in the
trainer): `algorithm` (the objective as pure functions), `batch` (`Trajectory`, `pack`),
`loss` (`rl_loss`: model outputs + a packed batch -> scalar and metrics), `trainer`
(`rl_step`: one RL step on the project's `train_step`), `sampler` (`TaskSampler`), `orchestrator` (`Orchestrator`,
`OrchestratorConfig`), `summarize` (self-summarization), `episodes` (scoring a rollout),
`config` (`RLConfig`, `load_config`), `run` (`run_rl`), `compare` and `plots` (the final
table and PNGs), `quick` (a random tiny checkpoint and settings for `--quick` modes).
See the composer-rl README, "The asynchronous RL loop".
"""
