"""The asynchronous RL loop.

Imported by module, not from here: `algorithm` (the objective as pure functions), `batch`
(`Trajectory`, `pack`), `loss` (`rl_loss`: model outputs + a packed batch -> scalar and
metrics), `trainer` (`rl_step`: one RL step on the project's `train_step`), `sampler`
(`TaskSampler`), `orchestrator` (`Orchestrator`, `OrchestratorConfig`), `fates` (each
group's recorded fate), `episodes` (scoring a rollout), `config` (`RLConfig`,
`load_config`), `services` (the training, inference and evaluation services around those
classes), `run` (`run_rl`: the wiring on the services), `compare` and `plots` (the final
table and PNGs), `quick` (settings for `--quick` modes). Each imports only what lies below
it (the `composer_rl.rl layers` contract of the root pyproject.toml). See the composer-rl
README, "The asynchronous RL loop".
"""
