"""The model registry: which model directories the server serves (``TRANSDUCE_MODELS``), what each translates, and
the routes between languages.

``TRANSDUCE_MODELS`` names a directory of model directories (each sub-directory is one model, named after it; hidden
ones, such as a ``.staging`` folder where a replacement is prepared, are skipped) or a comma-separated list of model
directories. A model's language pairs come from its manifest, read without opening onnxruntime sessions or hashing its
files (its checksums are checked when it loads). A model is known by its directory name; its ``fingerprint`` (the
manifest's bytes and the size and modification time of every file it names) changes when the directory is replaced,
which is how a reload tells a replaced model from an unchanged one.

A pair is routed to a model that translates it directly; when none does but one translates ``source -> en`` and one
``en -> target``, through English (``PIVOT``), in two stages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from transduce.engine.errors import ModelLoadError
from transduce.engine.io_names import MANIFEST_FILE
from transduce.engine.manifest import FILE_KEYS, Manifest, load_manifest

PIVOT = "en"  # the language two models are chained through when no model translates a pair directly
LISTED_PAIRS = 60  # an unsupported-pair message names at most this many pairs of each kind

Pair = tuple[str, str]


@dataclass(frozen=True)
class ModelSpec:
    """One model directory as a scan found it: its pairs, or why it cannot be served (``error``)."""

    name: str
    path: Path
    fingerprint: str
    manifest: Manifest | None = None
    error: str | None = None

    @property
    def pairs(self) -> tuple[Pair, ...]:
        """The directions the manifest declares (none when it could not be read)."""
        return self.manifest.pairs if self.manifest is not None else ()

    @property
    def model_name(self) -> str | None:
        """The name recorded at export."""
        return self.manifest.model_name if self.manifest is not None else None

    @property
    def version(self) -> str:
        """A short form of the fingerprint, shown in /health/ready."""
        return self.fingerprint[:12]


def model_paths(models: str) -> list[Path]:
    """The model directories ``models`` (TRANSDUCE_MODELS) names: a comma-separated list of directories, or one
    directory that is a model directory itself (it holds a manifest) or holds model directories (its sub-directories,
    hidden ones skipped). ModelLoadError when a single directory named does not exist."""
    parts = [p.strip() for p in models.split(",") if p.strip()]
    if not parts:
        raise ModelLoadError("models (TRANSDUCE_MODELS) names no directory")
    if len(parts) > 1:
        paths = [Path(p).expanduser() for p in parts]
        for i, path in enumerate(paths):  # a model is known by its directory's name
            twin = next((other for other in paths[:i] if other.name == path.name), None)
            if twin is not None:
                raise ModelLoadError(
                    f"models (TRANSDUCE_MODELS) names two directories called {path.name!r} ({twin} and {path}): "
                    "a model is known by its directory's name; list each model once, or rename one"
                )
        return paths
    root = Path(parts[0]).expanduser()
    if not root.is_dir():
        raise ModelLoadError(
            f"models (TRANSDUCE_MODELS): {root} is not a directory (name a directory of model directories, or a "
            "comma-separated list of model directories)"
        )
    if (root / MANIFEST_FILE).is_file():
        return [root]
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        raise ModelLoadError(f"models (TRANSDUCE_MODELS): cannot list {root}: {exc.strerror or exc}") from exc


def fingerprint(path: Path, manifest: Manifest | None) -> str:
    """SHA-256 over manifest.json and the size and modification time of every file it names (no file is read)."""
    digest = hashlib.sha256()
    try:
        digest.update((path / MANIFEST_FILE).read_bytes())
    except OSError:
        digest.update(b"no manifest")
    if manifest is not None:
        raw = manifest.raw
        checksums = raw.get("checksums") if isinstance(raw.get("checksums"), dict) else {}
        names = {str(raw[key]) for key in FILE_KEYS if key in raw} | {str(k) for k in checksums or {}}
        for name in sorted(names):
            try:
                stat = (path / name).stat()
                digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
            except (OSError, ValueError):  # (a name with a NUL character: ValueError)
                digest.update(f"{name}:missing;".encode())
    return digest.hexdigest()


def read_spec(path: Path, name: str | None = None) -> ModelSpec:
    """The spec of one model directory (its manifest only; an unreadable one gives a spec with ``error``)."""
    name = name or path.name
    try:
        manifest = load_manifest(path, check_files=False)
    except ModelLoadError as exc:
        return ModelSpec(name, path, fingerprint(path, None), error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one directory never takes the scan down (reload, start-up)
        return ModelSpec(name, path, fingerprint(path, None), error=f"{path}: its manifest cannot be read: {exc!r}")
    if not manifest.pairs:
        return ModelSpec(name, path, fingerprint(path, manifest), manifest, f"{path}: its manifest declares no pairs")
    return ModelSpec(name, path, fingerprint(path, manifest), manifest)


def scan(models: str) -> list[ModelSpec]:
    """Every model directory ``models`` names, read (blocking: run it off the event loop). Two directories with the
    same name: the second is reported as an error (models are known by their directory names)."""
    specs: dict[str, ModelSpec] = {}
    for path in model_paths(models):
        spec = read_spec(path)
        if spec.name in specs:
            first = specs[spec.name].path
            spec = ModelSpec(spec.name + f"@{path}", path, spec.fingerprint, error=f"{first} has the same name")
        specs[spec.name] = spec
    return list(specs.values())


def pairs_text(pairs: Iterable[Pair]) -> str:
    """``a->b, c->d`` (at most LISTED_PAIRS, then how many more)."""
    listed = [f"{a}->{b}" for a, b in sorted(pairs)]
    more = f" and {len(listed) - LISTED_PAIRS} more (see /languages)" if len(listed) > LISTED_PAIRS else ""
    return ", ".join(listed[:LISTED_PAIRS]) + more if listed else "none"


@dataclass(frozen=True)
class Stage:
    """One engine pass of a route: ``model`` translates ``source -> target``."""

    model: str
    source: str
    target: str


@dataclass(frozen=True)
class Route:
    """How a pair is translated: one stage (direct) or two through ``PIVOT``."""

    stages: tuple[Stage, ...]

    @property
    def pivot(self) -> str | None:
        """The language between the stages, or None for a direct route."""
        return self.stages[0].target if len(self.stages) > 1 else None

    @property
    def models(self) -> list[str]:
        """The models the route uses, in order."""
        return [s.model for s in self.stages]


class RouteTable:
    """The pairs a set of models serves, directly and through English, and the route for each."""

    def __init__(self, served: Mapping[str, Sequence[Pair]]) -> None:
        self.by_pair: dict[Pair, list[str]] = {}
        for name in sorted(served):
            for pair in served[name]:
                self.by_pair.setdefault(pair, []).append(name)
        self.direct = frozenset(self.by_pair)
        into, out_of = {s for s, t in self.direct if t == PIVOT}, {t for s, t in self.direct if s == PIVOT}
        self.pivots = frozenset((s, t) for s in into for t in out_of if s != t and (s, t) not in self.direct)

    @property
    def pairs(self) -> list[Pair]:
        """Every pair served, directly or through English, sorted."""
        return sorted(self.direct | self.pivots)

    def _best(self, pair: Pair, rank: Callable[[str], int]) -> str:
        return min(self.by_pair[pair], key=lambda name: (rank(name), name))

    def route(self, source: str, target: str, rank: Callable[[str], int] = lambda _: 0) -> Route | None:
        """The route for ``source -> target`` (among several models for a stage, the lowest ``rank`` wins: the
        pool ranks loaded models first), or None when the pair is not served."""
        if (source, target) in self.direct:
            return Route((Stage(self._best((source, target), rank), source, target),))
        if (source, target) in self.pivots:
            first, second = self._best((source, PIVOT), rank), self._best((PIVOT, target), rank)
            return Route((Stage(first, source, PIVOT), Stage(second, PIVOT, target)))
        return None

    def unsupported(self, source: str, target: str, failed: Mapping[str, ModelSpec], reasons: Mapping[str, str]) -> str:
        """Why ``source -> target`` is refused: the pairs served and those through English, and a failed model that
        would have translated it."""
        text = (
            f"language pair {source}->{target} is not served (served: {pairs_text(self.direct)}; through English: "
            f"{pairs_text(self.pivots)})"
        )
        could = self.direct | {pair for spec in failed.values() for pair in spec.pairs}  # served, or if it loaded
        legs = [(source, target)]
        if PIVOT not in (source, target) and {(source, PIVOT), (PIVOT, target)} <= could:  # through English
            legs += [(source, PIVOT), (PIVOT, target)]
        for leg in legs:
            broken = sorted(name for name, spec in failed.items() if leg in spec.pairs)
            if broken:
                what = "it" if leg == (source, target) else f"{leg[0]}->{leg[1]} (through English)"
                return text + f"; model {broken[0]}, which translates {what}, failed: {reasons.get(broken[0], '?')}"
        unread = sorted(name for name, spec in failed.items() if not spec.pairs)  # its pairs are unknown
        if unread:
            text += f"; model {unread[0]} cannot be read (it may translate it): {reasons.get(unread[0], '?')}"
        return text
