"""Ollama through its OpenAI-compatible ``/v1`` endpoint: local, zero cost.

The only differences from :class:`OpenAIProvider` are the URL, the price (none)
and the messages: when nothing listens at ``OLLAMA_BASE_URL`` the error says
how to start Ollama, and an unknown model says how to pull it.
"""

from __future__ import annotations

import httpx

from agent_core.llm.errors import LLMError, ModelNotAvailable, RequestFailed
from agent_core.llm.openai import OpenAIProvider


class OllamaProvider(OpenAIProvider):
    @property
    def api_root(self) -> str:
        return self.config.base_url.removesuffix("/v1") + "/v1"

    def error(self, exc: httpx.HTTPError) -> LLMError:
        if isinstance(exc, httpx.ConnectError):
            return RequestFailed(
                f"{self.name}: nothing is listening at {self.config.base_url}. Is Ollama "
                f"running? Start it with `ollama serve` (or set OLLAMA_BASE_URL), then "
                f"`ollama pull {self.config.model}`."
            )
        return super().error(exc)

    def status_error(self, response: httpx.Response, body: bytes) -> LLMError:
        err = super().status_error(response, body)
        if isinstance(err, ModelNotAvailable):
            return ModelNotAvailable(f"{err} (try `ollama pull {self.config.model}`)")
        return err
