"""Writing a directory so that readers see the old one or the complete new one, never a half-written one."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transduce.engine.io_names import weights_file
from transduce.paths import check_output, check_replaceable_dir, resolved

ONNX_EXPORT = ("manifest.json", "format", "transduce-onnx")  # (file, key, value) that marks an earlier export


def check_target(
    target: Path,
    *,
    marker: tuple[str, str, str] | None,
    inputs: Iterable[str | Path | None] = (),
    what: str = "export",
    hint: str = "",
) -> Path:
    """``target`` resolved, after refusing (ValueError) one that holds an input or is a file or a directory of other
    files: it must be absent, empty, or an earlier ``what``, whose ``marker`` file is JSON with that key and value
    (None: a directory of the project's own, replaced whatever it holds); ``hint`` follows the refusal's reason."""
    target = resolved(target, what=f"the {what}")  # "." has a name once resolved
    check_output(target, inputs, what=f"the {what}")
    if marker is not None:
        check_replaceable_dir(target, marker[0], what=what, stamp=marker[1:], hint=hint)
    return target


@contextmanager
def replacing_dir(
    target: Path,
    *,
    marker: tuple[str, str, str] | None,
    inputs: Iterable[str | Path | None] = (),
    what: str = "export",
    hint: str = "",
) -> Iterator[Path]:
    """Yield an empty directory beside ``target`` to fill; when the block ends without error it replaces ``target``.

    An exception leaves an existing ``target`` as it was and removes the partial work. ``check_target`` first."""
    target = check_target(target, marker=marker, inputs=inputs, what=what, hint=hint)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as tmp:
        work = Path(tmp) / target.name
        work.mkdir()
        yield work
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)


def save_graph(model: Any, path: Path, *, min_bytes: int = 1024) -> Path | None:
    """Write the ONNX ``model`` to ``path`` with its tensors of ``min_bytes`` or more in ``weights_file`` beside it;
    returns that file (None when no tensor is that large). ``model`` is changed: its tensors now point at the file.

    onnxruntime maps such a file into memory and uses the weights where they lie, instead of parsing them out of the
    graph and copying them: the CPU engine's peak memory fell from 132 to 108 MB for the shipped model (README,
    lever table), the pages of an embedding table it never reads are never loaded, and the mapped pages are the
    page cache's, shared by every process serving the same files."""
    import onnx

    data = path.with_name(weights_file(path.name))
    data.unlink(missing_ok=True)  # onnx appends to an existing file
    onnx.save(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=min_bytes,
        convert_attribute=True,  # constant tables too (the traced graphs' positions)
    )
    if not data.is_file():
        return None
    data.chmod(path.stat().st_mode & 0o777)  # onnx creates it 0600: readable as the graph is (a serving user)
    return data


def store_weights_apart(path: Path) -> Path | None:
    """``save_graph`` for a graph another tool wrote to ``path`` (torch's exporter, onnxruntime's quantiser)."""
    import onnx

    return save_graph(onnx.load(str(path)), path)  # loaded with any weights already stored apart


def with_weights(model_dir: Path, files: list[str]) -> list[str]:
    """``files`` and, after each, its weights file when it has one in ``model_dir``."""
    return [name for f in files for name in (f, weights_file(f)) if (model_dir / name).is_file()]
