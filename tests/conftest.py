"""Test-wide settings: hypothesis without deadlines (shared 2-core machines are noisy)
and the compiler's debug checks (verifier after every pass, plan verification) on."""

import os

from hypothesis import HealthCheck, settings

os.environ.setdefault("TENSORGRAPH_DEBUG", "1")

settings.register_profile(
    "default",
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=400)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
