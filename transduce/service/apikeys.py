"""API keys: those of ``api_keys`` and those of a key file (``api_keys_file``), one a line, each with its own
requests a minute if it has one. The file is read when the settings are, and again on SIGHUP and ``POST
/admin/reload``, so keys are added, revoked and re-limited without a restart (a file that cannot be read, or reads
wrong, leaves the keys as they were). A key is never written into a message or the log: lines are named by number.

File format::

    # comments and blank lines are skipped
    3f9a6c1e-team-a          # req_limit applies (requests a minute per client)
    7b2d0e44-batch-job 600   # its own limit: 600 a minute
    c0ffee-internal 0        # no limit
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from transduce.service.ratelimit import RateLimiter, key_client

log = logging.getLogger("transduce.service")

MAX_KEY_LIMIT = 1_000_000_000  # requests a minute: as req_limit's ceiling
MAX_KEY_CHARS = 256  # what a request's api_key field takes
_COMMENT = re.compile(r"(^|\s)#.*")
KeyLimits = dict[str, int | None]  # key -> its own requests a minute (0: none; None: req_limit's)


class KeyFileError(ValueError):
    """The key file cannot be read or is not in its format; the message names the file and the line, never a key."""


def load_key_file(path: str | Path) -> KeyLimits:
    """The keys of the file at ``path`` and their limits; KeyFileError saying what to fix."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise KeyFileError(f"api_keys_file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise KeyFileError(f"api_keys_file {path} cannot be read: {exc.strerror or exc}") from None
    keys: KeyLimits = {}
    first_seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = _COMMENT.sub("", line).split()  # a comment starts a line or follows a space: "#" in a key is refused
        where = f"api_keys_file {path} line {number}"
        if not fields:
            continue
        if len(fields) > 2:
            raise KeyFileError(f"{where}: write KEY, or KEY and its requests a minute (a key has no spaces)")
        if "#" in fields[0]:  # (it started a comment, which cut the key short)
            raise KeyFileError(f"{where}: a key cannot hold '#'")
        limit: int | None = None
        if len(fields) == 2:
            if not re.fullmatch(r"[0-9]{1,10}", fields[1]) or int(fields[1]) > MAX_KEY_LIMIT:  # (isdigit() takes "²")
                raise KeyFileError(
                    f"{where}: the key's limit must be a whole number of requests a minute from 0 (no limit) to "
                    f"{MAX_KEY_LIMIT}"
                )
            limit = int(fields[1])
        if fields[0] in first_seen:
            raise KeyFileError(f"api_keys_file {path} line {number} repeats the key of line {first_seen[fields[0]]}")
        first_seen[fields[0]] = number
        keys[fields[0]] = limit
    if not keys:
        raise KeyFileError(
            f"api_keys_file {path} lists no key: add keys (one a line), or unset api_keys_file to use api_keys alone"
        )
    return keys


@dataclass
class KeyRing:
    """The keys a server accepts now: ``listed`` (api_keys, fixed) and the key file's (``path``; re-read by
    ``reload``), with each one's own limit; a key in both takes the file's limit."""

    listed: tuple[str, ...]
    path: str | None = None
    from_file: KeyLimits | None = None

    def __post_init__(self) -> None:
        self.limits = self._merged(self.from_file)

    def _merged(self, from_file: KeyLimits | None) -> KeyLimits:
        return {**dict.fromkeys(self.listed), **(from_file or {})}

    def __bool__(self) -> bool:
        """Whether a key is required (any key is configured)."""
        return bool(self.limits)

    def __len__(self) -> int:
        return len(self.limits)

    def match(self, given: str) -> str | None:
        """The key ``given`` is, compared with every key in constant time, or None."""
        found = None
        for key in self.limits:
            if hmac.compare_digest(given.encode(), key.encode()):
                found = key
        return found

    def limit(self, key: str) -> int | None:
        """``key``'s own requests a minute (0: no limit), or None for req_limit's."""
        return self.limits.get(key)

    def reload(self) -> dict[str, int]:
        """Read the key file again and serve its keys from now on; KeyFileError (the keys stay as they were) when it
        cannot be used. What changed: keys now, added, removed, limits changed."""
        assert self.path is not None, "a key ring without a key file has nothing to reload"
        fresh = load_key_file(self.path)
        old, new = self.limits, self._merged(fresh)  # counted over the keys accepted: one in api_keys too stays
        self.from_file, self.limits = fresh, new
        report = {
            "keys": len(new),
            "added": sum(k not in old for k in new),
            "removed": sum(k not in new for k in old),
            "limits_changed": sum(k in old and old[k] != new[k] for k in new),
        }
        log.info("api keys re-read from %s: %s", self.path, ", ".join(f"{v} {k}" for k, v in report.items()))
        return report


def reload_keys(keyring: KeyRing, limiter: RateLimiter) -> dict[str, int] | None:
    """Read the key file again, when the server has one (None when not): its keys are those accepted from now on,
    and revoked keys' rate buckets are dropped. KeyFileError, the keys as they were, when it cannot be used."""
    if keyring.path is None:
        return None
    report = keyring.reload()
    limiter.forget_keys_but({key_client(key) for key in keyring.limits})
    return report
