"""Price lookups: prefixes, dated names, local backends, unknown models, overrides."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.llm.base import TokenUsage
from agent_core.llm.config import backend_config
from agent_core.llm.ollama import OllamaProvider
from agent_core.llm.openai import OpenAIProvider
from agent_core.llm.prices import DEFAULT_PRICE, PriceTable, strip_prefix
from tests.fakes.llm_servers import FakeLLMServer
from tests.unit.llm.conftest import KEY, config_for, make_settings

MILLION = TokenUsage(input=1_000_000, output=1_000_000)


@pytest.mark.parametrize(
    ("model", "usd_in", "usd_out"),
    [
        ("gpt-4o", 2.50, 10.0),
        ("openai/gpt-4o", 2.50, 10.0),
        ("gpt-4o-2024-08-06", 2.50, 10.0),
        ("gpt-4o-mini", 0.15, 0.60),
        ("gpt-4o-mini-2024-07-18", 0.15, 0.60),
        ("gpt-4.1-nano", 0.10, 0.40),
        ("o3-mini", 1.10, 4.40),
        ("claude-sonnet-4-20250514", 3.0, 15.0),
        ("anthropic/claude-3-5-haiku-latest", 0.80, 4.0),
        ("claude-opus-4-1-20250805", 15.0, 75.0),
    ],
)
def test_known_models(model: str, usd_in: float, usd_out: float) -> None:
    info = PriceTable().lookup(model)
    assert info.input_cost_per_token * 1e6 == pytest.approx(usd_in)
    assert info.output_cost_per_token * 1e6 == pytest.approx(usd_out)
    assert info.name == model


def test_cache_prices_are_billed() -> None:
    info = PriceTable().lookup("claude-sonnet-4-20250514")
    cost = info.cost(TokenUsage(cache_read=1_000_000, cache_write=1_000_000))
    assert cost == pytest.approx(0.30 + 3.75)


def test_every_claude_model_prices_cache_reads_and_writes() -> None:
    """Anthropic bills a cache read at 0.1x the input price and a 5-minute cache
    write at 1.25x: with a price of 0, cached tokens would cost nothing.  Claude
    Haiku 3 is the published exception ($0.25 input, $0.03 read, $0.30 write)."""
    from agent_core.llm.prices import _TABLE

    claude = [m for m in _TABLE if m.name.startswith("claude")]
    assert len(claude) >= 10
    haiku3 = PriceTable().lookup("claude-3-haiku-20240307")
    assert (haiku3.cache_read_cost_per_token * 1e6, haiku3.cache_write_cost_per_token * 1e6) == (
        pytest.approx(0.03),
        pytest.approx(0.30),
    )
    for m in claude:
        if m.name == "claude-3-haiku":
            continue
        assert m.cache_read_cost_per_token == pytest.approx(0.1 * m.input_cost_per_token), m.name
        assert m.cache_write_cost_per_token == pytest.approx(1.25 * m.input_cost_per_token), m.name


@pytest.mark.parametrize(
    ("model", "usd_in", "usd_out"),
    [("claude-opus-4-6", 5.0, 25.0), ("claude-sonnet-4-6", 3.0, 15.0)],
)
def test_newer_claude_models_are_not_priced_as_an_older_prefix(
    model: str, usd_in: float, usd_out: float
) -> None:
    info = PriceTable().lookup(model)  # claude-opus-4-6 once matched claude-opus-4 ($15 / $75)
    assert info.input_cost_per_token * 1e6 == pytest.approx(usd_in)
    assert info.output_cost_per_token * 1e6 == pytest.approx(usd_out)
    assert info.cache_read_cost_per_token * 1e6 == pytest.approx(usd_in / 10)


def test_context_windows() -> None:
    t = PriceTable()
    assert t.lookup("gpt-4o").context_window == 128_000
    assert t.lookup("claude-sonnet-4-20250514").context_window == 200_000
    assert t.lookup("gpt-4.1").context_window > 1_000_000


OPEN_MODELS = [
    "llama3.2",
    "meta-llama/llama-3.1-8b-instruct",
    "llama-3.3-70b-versatile",  # Groq
    "deepseek/deepseek-chat",  # OpenRouter
    "mistral-large-latest",  # Mistral's API
    "mistral-7b",
    "phi3",
    "gemma2:9b",
    "qwen2.5",
    "deepseek-r1",
    "codellama:13b",
]


@pytest.mark.parametrize("model", OPEN_MODELS)
def test_open_models_served_by_a_hosted_backend_are_paid_for(model: str) -> None:
    """An open model's name says nothing about who serves it: on Groq, OpenRouter
    or Mistral's API it costs money, so it gets the default price (budgets work)."""
    info = PriceTable().lookup(model)
    assert info.cost(MILLION) == DEFAULT_PRICE.cost(MILLION) > 0


@pytest.mark.parametrize("model", OPEN_MODELS)
def test_open_models_on_ollama_are_free(model: str) -> None:
    assert PriceTable().lookup(model, local=True).cost(MILLION) == 0.0


def test_anything_on_ollama_is_free() -> None:
    assert PriceTable().lookup("gpt-4o", local=True).cost(MILLION) == 0.0
    assert PriceTable().lookup("my-finetune", local=True).cost(MILLION) == 0.0


def test_the_backend_decides_what_is_free(server: FakeLLMServer) -> None:
    groq = OpenAIProvider(
        backend_config(
            make_settings(llm_backend="groq", groq_api_key=KEY, llm_model="llama-3.3-70b-versatile")
        )
    )
    assert groq.model_info().cost(MILLION) > 0
    ollama = OllamaProvider(config_for(server, "ollama", ollama_model="llama3.3"))
    assert ollama.model_info().cost(MILLION) == 0.0


def test_unknown_model_default_price_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    t = PriceTable()
    with caplog.at_level(logging.WARNING, "agent_core.llm.prices"):
        a = t.lookup("mystery-model-1")
        t.lookup("mystery-model-1")
        PriceTable().lookup("another-table-same-model")
    assert a.input_cost_per_token == DEFAULT_PRICE.input_cost_per_token
    warnings = [r for r in caplog.records if "mystery-model-1" in r.getMessage()]
    assert len(warnings) == 1


def test_strip_prefix() -> None:
    assert strip_prefix("openai/gpt-4o") == "gpt-4o"
    assert strip_prefix("models/gemini-pro") == "gemini-pro"
    assert strip_prefix("GPT-4o") == "gpt-4o"


def test_prices_file_toml(tmp_path: Path) -> None:
    f = tmp_path / "prices.toml"
    f.write_text(
        '[models."my-model"]\ninput_per_million = 0.5\noutput_per_million = 1.5\n'
        "context_window = 32768\nsupports_vision = true\n"
        '[models."gpt-4o"]\ninput_per_million = 1.0\noutput_per_million = 2.0\n'
    )
    t = PriceTable(str(f))
    info = t.lookup("my-model")
    assert info.cost(MILLION) == pytest.approx(2.0)
    assert info.context_window == 32768 and info.supports_vision
    assert t.lookup("openai/gpt-4o").cost(MILLION) == pytest.approx(3.0)  # overridden


def test_prices_file_json(tmp_path: Path) -> None:
    f = tmp_path / "prices.json"
    f.write_text(json.dumps({"models": {"x-1": {"input_per_million": 1, "output_per_million": 1}}}))
    assert PriceTable(str(f)).lookup("x-1-0924").cost(MILLION) == pytest.approx(2.0)


def test_bad_prices_file(tmp_path: Path) -> None:
    f = tmp_path / "prices.toml"
    f.write_text('[models."m"]\ninput_per_million = "cheap"\n')
    with pytest.raises(ConfigError, match="LLM_PRICES_FILE"):
        PriceTable(str(f))
    with pytest.raises(ConfigError, match="cannot read"):
        PriceTable(str(tmp_path / "missing.toml"))


def test_a_misspelt_key_in_the_prices_file_is_refused_not_free(tmp_path: Path) -> None:
    """input_per_millon was ignored and the model cost $0: DAILY_BUDGET_USD never
    tripped.  One line naming the file, the model, the key and the known keys."""
    f = tmp_path / "prices.toml"
    f.write_text('[models."my-model"]\ninput_per_millon = 2.5\noutput_per_million = 10\n')
    with pytest.raises(ConfigError) as exc:
        PriceTable(str(f))
    [line] = exc.value.problems
    assert line.startswith(
        f"LLM_PRICES_FILE: {f}: models.\"my-model\": unknown key 'input_per_millon'"
    )
    assert "did you mean input_per_million?" in line
    assert "known: input_per_million, output_per_million, " in line


def test_a_prices_file_entry_keeps_what_it_leaves_out(tmp_path: Path) -> None:
    """'adds to and overrides the table': gpt-4o's context_window alone keeps its
    prices and vision; a new model given only an input price keeps the default
    output price (budgets err high), not $0."""
    before = PriceTable().lookup("gpt-4o")
    f = tmp_path / "prices.toml"
    f.write_text(
        '[models."gpt-4o"]\ncontext_window = 64000\n[models."my-model"]\ninput_per_million = 1\n'
    )
    t = PriceTable(str(f))
    after = t.lookup("gpt-4o")
    assert after.context_window == 64000
    assert after.input_cost_per_token == before.input_cost_per_token
    assert after.output_cost_per_token == before.output_cost_per_token
    assert after.cache_read_cost_per_token == before.cache_read_cost_per_token
    assert after.supports_vision == before.supports_vision
    mine = t.lookup("my-model")
    assert mine.input_cost_per_token == pytest.approx(1e-6)
    assert mine.output_cost_per_token == DEFAULT_PRICE.output_cost_per_token


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("input_per_million = -1", "input_per_million must be a finite number, 0 or more"),
        ("output_per_million = inf", "output_per_million must be a finite number, 0 or more"),
        ("cache_read_per_million = nan", "cache_read_per_million must be a finite number"),
        ("context_window = 0", "context_window must be a whole number, 1 or more"),
        ("context_window = 1.5", "context_window must be a whole number, 1 or more"),
        ('supports_vision = "no"', "supports_vision must be true or false"),
    ],
)
def test_a_negative_or_non_finite_number_in_the_prices_file_is_refused(
    tmp_path: Path, line: str, problem: str
) -> None:
    f = tmp_path / "prices.toml"
    f.write_text(f'[models."m"]\n{line}\n')
    with pytest.raises(ConfigError) as exc:
        PriceTable(str(f))
    [got] = exc.value.problems
    assert got.startswith(f'LLM_PRICES_FILE: {f}: models."m": {problem}'), got


def test_cached_tokens_without_a_known_cache_price_are_billed_as_input() -> None:
    """A model whose cache prices are unknown (unknown models, price-file entries
    without them, e.g. chatgpt-4o) must not bill cached prompt tokens at $0."""
    info = PriceTable().lookup("chatgpt-4o")
    assert info.cache_read_cost_per_token == 0
    u = TokenUsage(input=100, output=0, cache_read=900, cache_write=0)
    assert info.cost(u) == pytest.approx(1000 * info.input_cost_per_token)
    local = PriceTable().lookup("llama3", local=True)
    assert local.cost(u) == 0


@pytest.mark.parametrize("written", ["32768", "32768.0", '"32768"'])
def test_a_context_window_written_as_a_whole_float_or_string_is_taken(
    tmp_path: Path, written: str
) -> None:
    """JSON writers emit 32768.0; the older reading (int()) took it and "32768"."""
    f = tmp_path / "prices.toml"
    f.write_text(f'[models."m"]\ncontext_window = {written}\n')
    assert PriceTable(str(f)).lookup("m").context_window == 32768
