"""The report's four services as plain classes, and `start_services` to run them as Ray actors.

Training (`TrainingService`), inference (`InferenceService`), evaluation
(`EvaluationService`) live here; the environment service is
`composer_infra.environment.EnvironmentService` (as an actor of `start_services`,
`JobEnvironmentService`: the same, with its backends from the job's plugins and grading beside
the sandbox; episodes reach it through `ServiceSandboxes`). Every service
takes the job's `composer_rl.plugins.JobPlugins` as ``plugins=``. They are thin wrappers
around the loop's classes (`rl_loss`, `Trajectory`, the version tree) and know nothing of
the wiring that starts them (`composer_rl.rl.run`); the root pyproject's import contracts
hold them to it.
"""

from composer_infra.environment import EnvironmentConfig, EnvironmentService
from composer_rl.rl.services.environment import (
    JobEnvironmentService,
    ServiceSandbox,
    ServiceSandboxes,
)
from composer_rl.rl.services.evaluation import EvaluationService
from composer_rl.rl.services.inference import InferenceService
from composer_rl.rl.services.launch import (
    SERVICE_NAMES,
    Services,
    TrainingRank,
    start_services,
)
from composer_rl.rl.services.training import TrainingConfig, TrainingService

__all__ = [
    "SERVICE_NAMES",
    "EnvironmentConfig",
    "EnvironmentService",
    "EvaluationService",
    "InferenceService",
    "JobEnvironmentService",
    "ServiceSandbox",
    "ServiceSandboxes",
    "Services",
    "TrainingConfig",
    "TrainingRank",
    "TrainingService",
    "start_services",
]
