"""Settings(BaseSettings): every knob of the service, from TRANSDUCE_* environment variables (or a .env file)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from transduce.engine.batcher import BatcherConfig
from transduce.engine.options import (
    MAX_BEAM_SIZE,
    SERVED_NO_REPEAT_NGRAM_SIZE,
    DecodeOptions,
    SchedulerConfig,
    no_repeat_problem,
)
from transduce.engine.text import has_letters
from transduce.service.apikeys import KeyFileError, KeyLimits, KeyRing, load_key_file
from transduce.service.glossary import GlossaryFileError, ServerGlossary, load_glossary_file

_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#*]+", re.IGNORECASE)  # what a browser's Origin header holds
# root_path: segments of URL path characters (uvicorn encodes it as ASCII into every request's path)
_ROOT_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)+")
OVERSUBSCRIBED = 4  # intra_threads or engine_replicas above this many times the usable cores: refused
MAX_FILE_TTL_S = 365 * 24 * 3600.0  # file_ttl_s: a year
MAX_BACKLOG = 65_535  # backlog: the kernel's somaxconn caps what it keeps anyway
MAX_REQ_LIMIT = 1_000_000_000  # req_limit (requests a minute): more is no limit, and a float overflows beyond 1e308
# settings with a ceiling, and what the value counts: file_ttl_s inf made a full store's Retry-After a 500, backlog
# 2**31 failed after the model loaded, a beam of 100,000 grew to gigabytes
_CEILINGS: dict[str, tuple[float, str]] = {
    "req_limit": (MAX_REQ_LIMIT, "requests a minute (0 = no limit)"),
    "file_ttl_s": (MAX_FILE_TTL_S, "seconds (a year)"),
    "max_beam_size": (MAX_BEAM_SIZE, "(a search keeps beam x vocabulary scores)"),
    "backlog": (MAX_BACKLOG, "(the kernel caps it at net.core.somaxconn)"),
}
# the engine's defaults, which the service's defaults are
BATCHER, DECODE, SCHEDULER = BatcherConfig(), DecodeOptions(), SchedulerConfig()


class Settings(BaseSettings):
    """Service configuration; the README's configuration table lists the same fields."""

    model_config = SettingsConfigDict(env_prefix="TRANSDUCE_", env_file=".env", env_ignore_empty=True, extra="ignore")

    model_dir: str | None = Field(None, description="exported model directory (from `transduce export`)")
    models: str | None = Field(
        None,
        description="several models: a directory holding model directories, or a comma-separated list of model "
        "directories (instead of model_dir); they load on first use and reload on SIGHUP or POST /admin/reload",
    )
    memory_budget_mb: float = Field(
        0.0,
        description="with models: resident memory the loaded models may use (measured per load); beyond it the least "
        "recently used idle model is unloaded (0 = no budget)",
    )
    admin_key: str = Field("", description="key for POST /admin/reload; empty = no admin endpoint (404)")
    device: str = Field("auto", description="auto | cpu | cuda")
    strict_device: bool = Field(False, description="fail at start-up instead of falling back to CPU")
    intra_threads: int = Field(
        0,
        description="onnxruntime threads per operator and engine replica (0 = the cores divided by the replicas; "
        "1 per replica on CUDA: the graph runs on the GPU)",
    )
    shortlist: bool = Field(
        True,
        description="on the CPU, score only each batch's candidate pieces when the model was exported with a "
        "vocabulary shortlist (faster; false: the whole vocabulary)",
    )
    engine_replicas: int = Field(
        0,
        description="engine sessions decoding side by side, a copy of the model in memory each unless they have "
        "1 thread on the CPU, when they share one (static: batches; "
        "step: one running batch each, fed from one queue); 0 = auto: 2 on a CPU with 2 or more cores (2 replicas of "
        "1 thread on 2 cores served 1.17-1.49x the requests of 1 of 2 threads at beam 4 from 16 clients on, and the "
        "step scheduler 1.1-1.7x), 2 of 1 thread each on CUDA (1.05-1.91x one engine of 16 threads on an H200), "
        "1 on 1 core",
    )
    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(5000, description="port to bind (5000 is LibreTranslate's)")
    max_batch_size: int = Field(
        BATCHER.max_batch_size,
        description="sentences per engine batch (static) / decoding at once in each engine replica's worker "
        "(step); 1 = no batching",
    )
    scheduler: Literal["step", "static"] = Field(
        "static",
        description="step: sentences join the running batch between decoder steps and leave when done; "
        "static: a batch of sentences runs to completion before the next one starts",
    )
    max_batch_tokens: int = Field(
        BATCHER.max_batch_tokens, description="source tokens x beam size per engine batch (static)"
    )
    max_tokens_in_flight: int = Field(
        SCHEDULER.max_tokens_in_flight,
        description="source tokens x beam decoding at once in each engine replica's worker (step); 0 = auto: 2048 on "
        "the CPU (behind heavy requests, short ones answered 3-4x sooner than with 8192 on the 2-core bench machine, "
        "at the same requests/s), 8192 on CUDA",
    )
    max_wait_ms: float = Field(BATCHER.max_wait_ms, description="how long a queued sentence waits for company")
    max_queue_items: int = Field(
        BATCHER.max_queue_items, description="sentences allowed to wait; beyond: 503 + Retry-After"
    )
    request_timeout_s: float = Field(30.0, description="deadline of a request in the queue; beyond it: 504")
    max_chars: int = Field(5000, description="characters per request (all of q); beyond it: 413")
    max_items: int = Field(50, description="entries in a q list; beyond it: 400")
    max_sentence_tokens: int = Field(200, description="source tokens per sentence; beyond it: 400")
    max_body_bytes: int = Field(1_000_000, description="request body size; beyond it: 413")
    max_beam_size: int = Field(8, description="largest beam_size a request may ask for")
    default_beam_size: int = Field(DECODE.beam_size, description="beam size when the request names none (1 = greedy)")
    max_alternatives: int = Field(5, description="largest alternatives count a request may ask for")
    # runaway guard: a translation is at most max_length_ratio x its source tokens + extra_decoding_length tokens
    max_length_ratio: float = Field(DECODE.max_length_ratio, description="output length cap relative to the source")
    extra_decoding_length: int = Field(
        DECODE.extra_decoding_length, description="tokens added to the output length cap (for short sources)"
    )
    no_repeat_ngram_size: int = Field(
        SERVED_NO_REPEAT_NGRAM_SIZE,
        description="a translation never repeats a run of this many pieces (breaks loops such as 'the cat the cat "
        "the cat'); 0 = off",
    )
    max_glossary_terms: int = Field(100, description="entries in a request's glossary; beyond: 400 (0 = none taken)")
    glossary_file: str | None = Field(
        None,
        description='server-wide glossary: JSON {"en-de": [{"source": ..., "target": ... or null}, ...]}, read at '
        "start-up; a request's glossary overrides it term by term",
    )
    api_keys: str = Field("", description="comma-separated API keys; empty = no key needed")
    api_keys_file: str | None = Field(
        None,
        description="a file of API keys, one a line, each optionally followed by its own requests a minute (0: no "
        "limit); with api_keys, both are accepted; re-read on SIGHUP and POST /admin/reload",
    )
    protect_health: bool = Field(False, description="require the API key on /health*, /metrics too")
    shutdown_grace_s: float = Field(30.0, description="time to finish accepted requests after SIGTERM")
    log_json: bool = Field(True, description="one JSON line per request on stderr")
    canary_text: str = Field("Hello world.", description="sentence translated at start-up before ready")
    cache_size: int = Field(
        10_000,
        description="sentence translations kept (LRU by sentence, pair and options), and 400 times as many "
        "characters of them; 0 turns the cache off",
    )
    max_file_bytes: int = Field(2_000_000, description="size of a file sent to /translate_file; beyond it: 413")
    max_file_chars: int = Field(
        100_000, description="characters of text in a file sent to /translate_file (the page limit); beyond it: 413"
    )
    req_limit: int = Field(
        0,
        description="requests a minute per client address to /translate, /translate_file and /detect (a minute's "
        "worth at once); beyond: 429 + Retry-After; 0 = no limit",
    )
    max_file_jobs: int = Field(
        4, description="files parsed or translated at once (POST /translate_file); beyond: 503 + Retry-After"
    )
    file_ttl_s: float = Field(600.0, description="seconds a translated file can be downloaded before it is deleted")
    max_stored_bytes: int = Field(
        500_000_000,
        description="bytes of translated files waiting to be downloaded (this server's); beyond: 503 + Retry-After; "
        "0 = no limit",
    )
    max_stored_files: int = Field(
        10_000, description="translated files waiting to be downloaded; beyond: 503 + Retry-After; 0 = no limit"
    )
    files_dir: str | None = Field(
        None, description="where translated files wait (default: transduce-files in the system's temp dir)"
    )
    public_url: str = Field(
        "",
        description="the server's address as clients reach it (behind a proxy: https://translate.example.com/mt), "
        "used in translatedFileUrl; empty = the address the request came to",
    )
    root_path: str = Field(
        "",
        description="the path prefix a reverse proxy serves this server under and strips from what it passes on, e.g. "
        "/mt: the web page, /docs and translatedFileUrl then carry it; empty = served from /",
    )
    cors_origins: str = Field(
        "", description="comma-separated origins allowed to call the API from a browser (* = any); empty = CORS off"
    )
    # connections (transduce serve): idle and slow clients are closed, so they cannot use up the file descriptors
    keep_alive_timeout_s: int = Field(5, description="seconds an idle keep-alive connection stays open")
    idle_release_s: float = Field(
        30.0,
        description="seconds without translate, file or detect requests in work or models loading, after which the "
        "memory the engines freed is handed back to the system, once per idle spell; 0 = never",
    )
    request_read_timeout_s: float = Field(
        10.0, description="seconds a client has to send a request's headers, and again its body; beyond: closed / 408"
    )
    max_connections: int = Field(
        1000, description="open connections; beyond: the oldest idle one is closed, or the new one gets 503"
    )
    backlog: int = Field(2048, description="connections the kernel queues before the server accepts them")
    log_throttle_s: float = Field(
        10.0, description="a repeated resource error (e.g. too many open files) is logged at most once per this long"
    )

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        if url and (not url.startswith(("http://", "https://")) or "?" in url or "#" in url or " " in url):
            raise ValueError("public_url must be an http:// or https:// address with no query, e.g. https://mt.example")
        return url

    @field_validator("root_path")
    @classmethod
    def _root_path(cls, value: str) -> str:
        path = value.strip().rstrip("/")
        if path and not _ROOT_PATH.fullmatch(path):
            raise ValueError(f"root_path must be a path such as /mt (ASCII, no spaces, query or '//'), got {value!r}")
        return path

    @field_validator(*_CEILINGS)
    @classmethod
    def _at_most(cls, value: float, info: ValidationInfo) -> float:
        ceiling, unit = _CEILINGS[str(info.field_name)]
        if value > ceiling:
            raise ValueError(f"must be at most {ceiling:.0f} {unit}, got {value}")
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu", "cuda"):
            raise ValueError("device must be auto, cpu or cuda")
        return value

    @field_validator(
        "max_batch_size",
        "max_batch_tokens",
        "max_file_bytes",
        "max_file_chars",
        "max_file_jobs",
        "max_queue_items",
        "max_chars",
        "max_items",
        "max_sentence_tokens",
        "max_body_bytes",
        "max_beam_size",
        "default_beam_size",
        "keep_alive_timeout_s",
        "max_connections",
        "backlog",
    )
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be >= 1, got {value}")
        return value

    @field_validator(
        "max_wait_ms",
        "shutdown_grace_s",
        "max_alternatives",
        "intra_threads",
        "cache_size",
        "max_glossary_terms",
        "extra_decoding_length",
        "memory_budget_mb",
        "engine_replicas",
        "max_tokens_in_flight",
        "max_stored_bytes",
        "max_stored_files",
        "req_limit",
        "idle_release_s",
    )
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if not value >= 0:  # also refuses NaN
            raise ValueError(f"must be >= 0, got {value}")
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {value}")
        return value

    @field_validator("intra_threads", "engine_replicas")
    @classmethod
    def _within_the_cores(cls, value: int) -> int:
        if value > 4:  # the usable cores only matter for large values (onnxruntime is imported to count them)
            from transduce.engine.session import usable_cores

            cores = usable_cores()
            if value > OVERSUBSCRIBED * cores:
                raise ValueError(
                    f"{value} is over {OVERSUBSCRIBED} x the {cores} cores this process may use (its CPU affinity and "
                    "quota): threads or copies of the model that could only queue on each other; 0 = auto"
                )
        return value

    @field_validator("no_repeat_ngram_size")
    @classmethod
    def _ngram(cls, value: int) -> int:
        if (problem := no_repeat_problem(value)) is not None:
            raise ValueError(problem)
        return value

    @field_validator("max_length_ratio")
    @classmethod
    def _ratio(cls, value: float) -> float:
        if not 0 < value <= 100:  # also refuses NaN
            raise ValueError(f"must be > 0 and at most 100, got {value}")
        return value

    @field_validator("request_timeout_s", "file_ttl_s", "request_read_timeout_s")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"must be > 0 seconds, got {value}")
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip():  # (`--host "$HOST"` with HOST unset bound every interface)
            raise ValueError("must name an address to listen on, such as 127.0.0.1 (every interface: 0.0.0.0)")
        return value.strip()

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError(f"must be a TCP port between 0 and 65535, got {value}")
        return value

    _glossary: ServerGlossary = PrivateAttr(default_factory=dict)
    _file_keys: KeyLimits = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _beam_and_glossary(self) -> Settings:
        if self.model_dir and self.models:
            raise ValueError(
                "model_dir and models are both set: TRANSDUCE_MODEL_DIR serves one model directory, TRANSDUCE_MODELS "
                "several; set one of them"
            )
        if self.default_beam_size > self.max_beam_size:
            raise ValueError(
                f"default_beam_size {self.default_beam_size} is over max_beam_size {self.max_beam_size}: lower "
                "default_beam_size or raise max_beam_size"
            )
        try:  # read here: a bad file stops start-up with one line saying what to fix
            if self.glossary_file:
                self._glossary = load_glossary_file(self.glossary_file)
            if self.api_keys_file:
                self._file_keys = load_key_file(self.api_keys_file)
        except (GlossaryFileError, KeyFileError) as exc:
            field = "glossary_file" if isinstance(exc, GlossaryFileError) else "api_keys_file"
            problem = PydanticCustomError(field, "{problem}", {"problem": str(exc)})
            detail = InitErrorDetails(type=problem, loc=(field,), input=getattr(self, field))
            raise ValidationError.from_exception_data(type(self).__name__, [detail]) from None
        return self

    @model_validator(mode="after")
    def _combinations(self) -> Settings:
        """Settings that are each valid but make no sense together, or with this machine."""
        if self.max_wait_ms >= self.request_timeout_s * 1000:
            raise ValueError(
                f"max_wait_ms {self.max_wait_ms:g} is not below request_timeout_s {self.request_timeout_s:g} s: a "
                "sentence waiting that long for company would pass its deadline; lower max_wait_ms"
            )
        if self.api_keys.strip() and not self.listed_keys:
            raise ValueError("api_keys names no key (only commas and spaces): list the keys, or leave it empty")
        if self.protect_health and not self.keys:
            raise ValueError(
                "protect_health needs api_keys or api_keys_file: without a key there is nothing to ask /health "
                "callers for"
            )
        if self.memory_budget_mb and not self.models:
            raise ValueError("memory_budget_mb applies to several models (models); with one model leave it 0")
        if not has_letters(self.canary_text):
            raise ValueError(
                f"canary_text {self.canary_text!r} has no letters: start-up translates it to prove the model decodes"
            )
        for origin in self.origins:  # what a browser's Origin header can hold, compared as a whole ("null": a file)
            if origin not in ("*", "null") and not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"cors_origins has {origin!r}, which is not an origin: scheme and host (and port), e.g. "
                    "https://app.example, or * for any (no wildcards inside a name)"
                )
        if self.files_dir and Path(self.files_dir).exists() and not Path(self.files_dir).is_dir():
            raise ValueError(f"files_dir {self.files_dir} is a file: name a directory (it is made when missing)")
        return self

    @property
    def glossary(self) -> ServerGlossary:
        """The glossary file's terms per (source, target) language pair (empty without a file)."""
        return self._glossary

    @property
    def origins(self) -> list[str]:
        """The configured CORS origins."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    @property
    def listed_keys(self) -> tuple[str, ...]:
        """The keys of api_keys, in the order written (the health check sends the first)."""
        return tuple(dict.fromkeys(k.strip() for k in self.api_keys.split(",") if k.strip()))

    @property
    def keys(self) -> frozenset[str]:
        """The API keys configured at start: api_keys' and the key file's (the server's ``KeyRing`` has them now)."""
        return frozenset(self.key_ring().limits)

    def key_ring(self) -> KeyRing:
        """The keys as the server starts with them; ``KeyRing.reload`` reads the key file again."""
        return KeyRing(self.listed_keys, self.api_keys_file, dict(self._file_keys) if self.api_keys_file else None)

    @field_validator("log_throttle_s")
    @classmethod
    def _seconds_not_negative(cls, value: float) -> float:
        if not value >= 0:
            raise ValueError(f"must be >= 0 seconds, got {value}")
        return value
