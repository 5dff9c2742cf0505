"""``deepcontext export``: write a profile in a format other tools open (speedscope, pprof,
hatchet, folded stacks, Chrome/Perfetto trace)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import DeepContextError
from ..render import exporters
from ..render._safe import printable
from ..render.exporters import ExportOptions
from ..tree.cct import CallingContextTree
from ..tree.profile_file import check_writable, load

HELP = "write a profile as speedscope, pprof, hatchet, folded stacks or a Chrome/Perfetto trace"

#: trees at least this large get a progress bar on stderr
PROGRESS_MIN_NODES = 20_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    formats = ", ".join(f"{e.name} ({'/'.join(e.extensions)})" for e in exporters.EXPORTERS.values())
    p.add_argument("file", help="a .dcprof profile")
    p.add_argument("--format", choices=sorted(exporters.EXPORTERS),
                   help=f"output format; guessed from -o's extension when omitted: {formats}")
    p.add_argument("-o", "--output", help="output file (default: FILE with the format's extension)")
    p.add_argument("--metric", help="export only this metric (single-metric formats default to "
                                    "the profile's main metric)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")


def resolve_output(args: argparse.Namespace) -> tuple[str, Path]:
    """The format name and output path from the arguments (pure: touches no file)."""
    if args.output:
        fmt = args.format or exporters.guess_format(args.output)
        return fmt, Path(args.output)
    if not args.format:
        raise DeepContextError("pass -o OUT (the format is guessed from its extension) or --format")
    ext = exporters.get(args.format).extensions[0]
    src = Path(args.file)
    return args.format, src.with_name(src.name.removesuffix(".dcprof") + ext)


@contextmanager
def progress_for(tree: CallingContextTree, label: str) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr for large trees; nothing for small ones."""
    if len(tree) < PROGRESS_MIN_NODES:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=len(tree) - 1)
        yield lambda n: bar.advance(task, n)


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file next to ``path`` and rename it, so a failed or interrupted
    export never leaves a half-written file under the final name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual new-file mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    fmt, out = resolve_output(args)
    exporter = exporters.get(fmt)
    check_writable(out, force=args.force)
    tree = load(args.file)
    with progress_for(tree, f"exporting {fmt}") as advance:
        data = exporter.render(tree, ExportOptions(metric=args.metric, advance=advance))
    try:
        write_atomically(out, data)
    except OSError as e:
        raise DeepContextError(f"cannot write {printable(str(out))}: {e.strerror or e}") from None
    print(f"wrote {printable(str(out))} ({exporter.description}, {len(data):,} bytes)", file=sys.stderr)
    return 0
