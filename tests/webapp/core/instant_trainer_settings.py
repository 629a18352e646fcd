"""Test settings for worker and daphne processes whose runs use the instant trainer."""
from webapp.settings.test import *  # noqa: F401,F403

CRUCIBLE_TRAINER_MODULE = "tests.webapp.core.instant_trainer"
