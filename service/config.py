"""Settings(BaseSettings): every knob of the service, from TRANSDUCE_* environment variables (or a .env file)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration; the README's configuration table lists the same fields."""

    model_config = SettingsConfigDict(env_prefix="TRANSDUCE_", env_file=".env", env_ignore_empty=True, extra="ignore")

    model_dir: str | None = Field(None, description="ONNX model directory (default: the shipped model)")
    device: str = Field("auto", description="auto | cpu | cuda")
    strict_device: bool = Field(False, description="fail at start-up instead of falling back to CPU")
    intra_threads: int = Field(0, description="onnxruntime threads per operator (0 = all cores)")
    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(5000, description="port to bind (LibreTranslate's default)")
    max_batch_size: int = Field(32, description="sentences per engine batch")
    max_batch_tokens: int = Field(4096, description="source tokens per engine batch")
    max_wait_ms: float = Field(5.0, description="how long a queued sentence waits for others to batch with")
    max_queue_items: int = Field(1024, description="sentences allowed to wait; beyond that: 503 + Retry-After")
    request_timeout_s: float = Field(30.0, description="deadline of a request in the queue; beyond it: 504")
    max_chars: int = Field(5000, description="characters per request (all of q); beyond it: 413")
    max_items: int = Field(50, description="entries in a q list; beyond it: 400")
    max_sentence_tokens: int = Field(200, description="source tokens per sentence; beyond it: 400")
    max_body_bytes: int = Field(1_000_000, description="request body size; beyond it: 413")
    max_beam_size: int = Field(8, description="largest beam_size a request may ask for")
    default_beam_size: int = Field(4, description="beam size when the request names none (1 = greedy)")
    max_alternatives: int = Field(5, description="largest alternatives count a request may ask for")
    api_keys: str = Field("", description="comma-separated API keys; empty = no key needed")
    protect_health: bool = Field(False, description="require the API key on /health*, /metrics too")
    shutdown_grace_s: float = Field(30.0, description="time to finish accepted requests after SIGTERM")
    log_json: bool = Field(True, description="one JSON line per request on stderr")
    canary_text: str = Field("Hello world.", description="sentence translated at start-up before ready")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu", "cuda"):
            raise ValueError("device must be auto, cpu or cuda")
        return value

    @field_validator("max_batch_size", "max_batch_tokens", "max_queue_items", "max_chars", "max_items",
                     "max_sentence_tokens", "max_body_bytes", "max_beam_size", "default_beam_size")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @field_validator("max_wait_ms", "shutdown_grace_s", "max_alternatives", "intra_threads")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if not value >= 0:  # also refuses NaN
            raise ValueError(f"must be >= 0, got {value}")
        return value

    @field_validator("request_timeout_s")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"must be > 0 seconds, got {value}")
        return value

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError(f"must be a TCP port between 0 and 65535, got {value}")
        return value

    @property
    def keys(self) -> frozenset[str]:
        """The configured API keys."""
        return frozenset(k.strip() for k in self.api_keys.split(",") if k.strip())
