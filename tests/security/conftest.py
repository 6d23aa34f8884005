"""The integration fixtures (``runtime``) for the fault tests too."""

from tests.integration.conftest import runtime  # noqa: F401
