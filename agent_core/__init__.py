"""Parley's platform-free core: the agent, its LLMs, tools and state.

Nothing in this package imports ``channels``, ``bots`` or any platform SDK.
"""

__version__ = "0.1.0"
