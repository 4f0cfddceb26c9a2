"""The asynchronous RL loop.

Imported by module, not from here: `algorithm` (the objective as pure functions), `batch`
(`Trajectory`, `pack`), `trainer` (`rl_loss`), `sampler` (`TaskSampler`), `orchestrator`
(`Orchestrator`, `OrchestratorConfig`), `episodes` (scoring a rollout), `config`
(`RLConfig`, `load_config`), `services` (the training, inference and evaluation services
around those classes), `run` (`run_rl`: the wiring on the services), `compare` and `plots`
(the final table and PNGs), `quick` (settings for `--quick` modes). Each imports only what
lies below it (the `composer_rl.rl layers` contract of the root pyproject.toml). See the
composer-rl README, "The asynchronous RL loop".
"""
