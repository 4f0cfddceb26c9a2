"""The report's four services as plain classes, and `start_services` to run them as Ray actors.

Training (`TrainingService`), inference (`InferenceService`), evaluation
(`EvaluationService`) live here; the environment service is
`composer_infra.environment.EnvironmentService` as is (as an actor of `start_services`,
`JobEnvironmentService`: the same, with its backends from the job's plugins). Every service
takes the job's `composer_rl.plugins.JobPlugins` as ``plugins=``. They are thin wrappers
around the loop's classes (`rl_loss`, `Trajectory`, the version tree) and know nothing of
the wiring that starts them (`composer_rl.rl.run`); the root pyproject's import contracts
hold them to it.
"""

from composer_infra.environment import EnvironmentConfig, EnvironmentService
from composer_rl.rl.services.evaluation import EvaluationService
from composer_rl.rl.services.inference import InferenceService
from composer_rl.rl.services.launch import (
    SERVICE_NAMES,
    JobEnvironmentService,
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
    "Services",
    "TrainingConfig",
    "TrainingRank",
    "TrainingService",
    "start_services",
]
