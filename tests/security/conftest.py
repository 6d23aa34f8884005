"""Fixtures for the security tests: the agent-core ``world`` (real workers, real Valkey,
a recording outbox, a scripted model, a ``counter`` tool that needs approval) and
the integration ``runtime``."""

from tests.integration.agent.conftest import world  # noqa: F401
from tests.integration.conftest import runtime  # noqa: F401
