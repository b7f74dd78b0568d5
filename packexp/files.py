"""Files a run writes whole: a reader sees them complete or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An ``OSError`` raised in the block names ``path`` if it names no file (a write to an
    open file, a full disk): the one line a user reads says which file."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def packexp_home() -> Path | None:
    """Where packexp keeps what serves every run of a user: ``$PACKEXP_HOME``, else
    ``~/packexp``; None where the user has no home directory (a container's arbitrary user)."""
    if os.environ.get("PACKEXP_HOME"):
        return Path(os.environ["PACKEXP_HOME"]).expanduser()
    try:
        return Path.home() / "packexp"
    except RuntimeError:
        return None


def home_path(name: str) -> str:
    """``${packexp_home:name}``: ``name`` in packexp's home, so a run in any directory finds
    what an earlier run kept there (calibrations, memory probes); ``outputs/<name>``, in the
    directory the command runs in, for a user without a home."""
    home = packexp_home()
    return str(home / name) if home is not None else f"outputs/{name}"


def write_json(path: Path, payload: Any) -> None:
    """Writes atomically: a reader sees the old file or the new one, never half of one.

    The directory is made if it is missing."""
    with atomic_file(path, "w") as f:
        json.dump(payload, f, indent=2)


@contextmanager
def atomic_file(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """A file to write that replaces ``path`` only once the block ends without error (its
    directory made if missing); a failed block leaves no file behind."""
    path = Path(path)
    with naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            os.chmod(tmp, 0o644)
            with os.fdopen(fd, mode) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def conf_dir() -> str:
    """The configs ``python -m packexp`` and ``packexp.tune`` compose: the copy a wheel ships
    as ``packexp/conf``, or the checkout's top-level ``conf/`` (an editable install)."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if (packaged / "config.yaml").is_file() else here.parent / "conf")
