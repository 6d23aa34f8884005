"""LLMs: the provider protocol (base), backends, reliability wrappers, the factory.

Start at :mod:`agent_core.llm.base` (the contract) and
:mod:`agent_core.llm.factory` (how the chain is assembled).
"""
