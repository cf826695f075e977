"""Reading inputs and writing outputs, for every command (the ground floor: CLIs, sweeps and calibration
share it).

Reading (:func:`read_input_bytes` and the readers on it): a regular file only (a FIFO, a device or a
directory is refused at once, never waited on), at most a cap per kind of file (the cap in the
message), UTF-8 text, nesting at most :data:`MAX_DEPTH` deep. Messages name the file, never quote it.

Writing (:func:`write_atomically`): a regular file (or a new name) is written beside its target and
renamed over it, keeping its mode; a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a
terminal) is written through, and a symlink is followed to what it names, never replaced itself. A set
of files is published all or nothing by :mod:`simulator.file_sets`.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import tempfile
import tomllib
from pathlib import Path

from simulator.errors import PlannerError

MiB = 2**20
# the most a reader takes of each kind of input: 10-100x the largest real one (a model config.json is
# ~10 KB, a measured-table profile ~2 MB, a vLLM per-request dump of 10k requests ~20 MB)
CAPS = {"scenario": 1 * MiB, "sweep": 1 * MiB, "hardware": 1 * MiB, "engine profile": 1 * MiB,
        "engine settings": 1 * MiB, "model config.json": 8 * MiB, "deployment calibration": 8 * MiB,
        "calibration profile": 64 * MiB, "acceptance": 64 * MiB, "prompt lengths": 64 * MiB,
        "measured runs": 64 * MiB, "journal": 1024 * MiB}
DEFAULT_CAP = 64 * MiB
MAX_DEPTH = 64  # nesting of a JSON / TOML input (the deepest real one is 5)


# --- reading ---------------------------------------------------------------------------------------

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """'a directory', 'a FIFO (named pipe)', ... for a st_mode that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def cap_text(cap: int) -> str:
    return f"{cap // MiB} MB" if cap >= MiB else f"{cap // 1024} KB"


def read_input_bytes(path: str | Path, what: str, cap: int | None = None, flag: str | None = None,
                     missing_hint: str = "", not_found: str = "") -> bytes:
    """The bytes of a regular file, at most ``cap`` (default :data:`CAPS` of ``what``). Opened without
    blocking (a FIFO with no writer, a terminal) and checked on the open descriptor, so nothing but a
    regular file is read; PlannerError naming ``flag`` and the file when it is missing, not a regular
    file, unreadable or larger than the cap."""
    cap = cap if cap is not None else CAPS.get(what, DEFAULT_CAP)
    where = f"{flag} {path}" if flag else f"{path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PlannerError(f"{where}: {not_found or what + ' file not found'}{missing_hint}") from None
    except IsADirectoryError:
        raise PlannerError(f"{where}: is a directory; give the {what} file") from None
    except OSError as err:
        raise PlannerError(f"{where}: cannot read the {what} file ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise PlannerError(f"{where}: is a directory; give the {what} file")
            raise PlannerError(f"{where}: is {file_kind(st.st_mode)}, not a regular file; give the {what} file")
        if st.st_size > cap:
            raise PlannerError(f"{where}: {st.st_size / MiB:.1f} MB is larger than the {cap_text(cap)} a {what}"
                               f" file may hold")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        chunks, size = [], 0
        while size <= cap:  # the size may have grown since fstat (or lie, as in /proc): read at most cap + 1
            chunk = os.read(fd, min(1 * MiB, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:
            raise PlannerError(f"{where}: larger than the {cap_text(cap)} a {what} file may hold")
        return b"".join(chunks)
    except OSError as err:
        raise PlannerError(f"{where}: cannot read the {what} file ({err.strerror or err})") from None
    finally:
        os.close(fd)


def read_input_text(path: str | Path, what: str, cap: int | None = None, flag: str | None = None,
                    missing_hint: str = "", not_found: str = "") -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (a byte-order mark dropped); PlannerError naming the byte
    offset, never the bytes, when it is not UTF-8."""
    data = read_input_bytes(path, what, cap, flag, missing_hint, not_found)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        where = f"{flag} {path}" if flag else f"{path}"
        raise PlannerError(f"{where}: not UTF-8 text (byte {err.start}); give the {what} file") from None


def nesting_depth(value) -> int:
    """How deep lists and dicts nest in a parsed document (iteratively: a deep one is what is refused)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((x, d + 1) for x in v)
    return deepest


def _check_depth(value, where: str, what: str):
    if nesting_depth(value) > MAX_DEPTH:
        raise PlannerError(f"{where}: nested more than {MAX_DEPTH} levels deep; not a {what} file")
    return value


def json_failure_reason(err: ValueError) -> str:
    """Why ``json.loads`` refused a text, in a few words: where its syntax broke, or (a ValueError that is not a
    JSONDecodeError) an integer past Python's 4300-digit limit."""
    return f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else "a number too long to read"


def parse_json_text(text: str, where: str, what: str):
    """A JSON document whose nesting is at most :data:`MAX_DEPTH`; PlannerError naming ``where`` else."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise PlannerError(f"{where}: nested more than {MAX_DEPTH} levels deep; not a {what} file") from None
    except ValueError as err:
        msg = f"{err.msg} at line {err.lineno} column {err.colno}" if isinstance(err, json.JSONDecodeError) else "bad value"
        raise PlannerError(f"{where}: {what} is not valid JSON ({msg})") from None
    return _check_depth(value, where, what)


def read_json_file(path: str | Path, what: str, cap: int | None = None):
    """A JSON file's content; PlannerError naming the file and ``what`` it should be when it is a
    directory, missing, unreadable, not a regular file, over its cap, not UTF-8 or not JSON."""
    return parse_json_text(read_input_text(path, what, cap, not_found=f"{what} not found"), str(path), what)


def read_toml_file(path: str | Path, what: str, missing_hint: str = "", cap: int | None = None) -> dict:
    """A TOML file's tables; PlannerError naming the file and ``what`` it should be when it is a
    directory, missing (``missing_hint`` appended), unreadable, not a regular file, over its cap, not
    text or not TOML."""
    text = read_input_text(path, what, cap, missing_hint=missing_hint)
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise PlannerError(f"{path}: nested more than {MAX_DEPTH} levels deep; not a {what} file") from None
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"{path}: malformed TOML: {err}") from None
    except ValueError:  # an integer of over 4300 digits (Python's limit on converting one)
        raise PlannerError(f"{path}: malformed TOML: a number too long to read; not a {what} file") from None
    return _check_depth(value, str(path), what)


def resolve_named_path(name: str | Path, base_dir: str | Path | None) -> Path:
    """A path named inside an input file: relative to that file's folder (``base_dir``), never to the
    working directory."""
    p = Path(name).expanduser()
    return p if p.is_absolute() or not base_dir else Path(base_dir) / p


# --- writing one file ----------------------------------------------------------------------------

def _names_proc(path: Path) -> bool:
    """Whether ``path`` is, or its chain of symlinks passes through, /proc or /dev/fd (/dev/stdout ->
    /proc/self/fd/1): a descriptor of some process, written through, never renamed over."""
    p = os.path.abspath(path)
    for _ in range(40):
        if p.startswith(("/proc/", "/dev/fd/")):
            return True
        try:
            link = os.readlink(p)
        except OSError:
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), link))
    return False


def output_target(path: str | Path, flag: str = "--output") -> tuple[bool, Path]:
    """(written through?, the path to write) for an output path: a character device or a FIFO (or a
    symlink to one, or a descriptor under /proc) is written through; a symlink to a regular file (or to
    nothing yet) is followed and its target replaced; a regular file or a new name is replaced."""
    target = Path(path)
    if not target.name or str(path).endswith(os.sep):  # 'out/': Path() drops the slash, the user meant a folder
        raise PlannerError(f"{flag} '{path}': names a directory; give a file name")
    try:
        lst = os.lstat(target)
    except FileNotFoundError:
        return False, target
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot use it ({err.strerror or err})") from None
    mode = lst.st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            return False, Path(os.path.realpath(target))  # a link to a file not made yet: make that file
        except OSError as err:
            raise PlannerError(f"{flag} {target}: a symlink that cannot be followed ({err.strerror or err})") from None
        if stat.S_ISREG(mode):
            return (True, target) if _names_proc(target) else (False, Path(os.path.realpath(target)))
    if stat.S_ISREG(mode):
        return False, target
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True, target
    if stat.S_ISDIR(mode):
        raise PlannerError(f"{flag} {target}: is a directory; give a file name")
    raise PlannerError(f"{flag} {target}: is {file_kind(mode)}; give a file, a character device or a FIFO")


def _check_replaceable(target: Path, flag: str, shown: Path) -> None:
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise PlannerError(f"{flag} {shown}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PlannerError(f"{flag} {shown}: directory {parent} is not writable")
    _probe_write(parent, shown, flag)


def check_output_file(path: str | Path, flag: str = "--output") -> Path:
    """Refuse an output file that cannot be written before any work is done."""
    through, real = output_target(path, flag)
    if through:
        if not os.access(real, os.W_OK):
            raise PlannerError(f"{flag} {path}: not writable")
    else:
        _check_replaceable(real, flag, Path(path))
    return Path(path)


def _write_through(path: Path, data: bytes, flag: str) -> None:
    """Write into a device, a FIFO or a descriptor (never blocking on a FIFO nobody reads)."""
    append = os.O_APPEND if stat.S_ISREG(os.stat(path).st_mode) else 0  # /dev/stdout redirected to a file
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | append)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise PlannerError(f"{flag} {path}: a FIFO that no process is reading; start the reader first") from None
        raise PlannerError(f"{flag} {path}: cannot write it ({err.strerror or err})") from None
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as err:
        raise PlannerError(f"{flag} {path}: cannot write it ({err.strerror or err})") from None
    finally:
        os.close(fd)


def write_atomically(path: str | Path, text: str | bytes, flag: str = "--output") -> None:
    """Write an output: a regular file beside its target, then renamed over it (a failure leaves the old
    file intact; its mode is kept); a device, a FIFO or a descriptor written through; a symlink followed."""
    data = text if isinstance(text, bytes) else text.encode()
    through, target = output_target(path, flag)
    if through:
        _write_through(target, data, flag)
        return
    _check_replaceable(target, flag, Path(path))
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    except OSError as err:
        raise PlannerError(f"{flag} {path}: cannot write there ({err.strerror or err})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise PlannerError(f"{flag} {path}: cannot write it ({err.strerror or err}); nothing was changed") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(out_dir: str | Path, flag: str = "--output-dir", names=()) -> Path:
    """Refuse an output directory that cannot be written before any work is done (creates nothing).

    ``names``: the files that will be written into it; one that exists there as a directory is refused too."""
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():  # mkdir cannot make it: refused now, not after the work
        raise PlannerError(f"{flag} {out}: a symlink to {os.readlink(out)}, which does not exist; create that"
                           " directory or give another")
    if out.exists() and not out.is_dir():
        raise PlannerError(f"{flag} {out}: exists and is not a directory")
    for name in names:
        if (out / name).is_dir():
            raise PlannerError(f"{flag} {out}: {name} is a directory; remove it or choose another directory")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and (not probe.is_dir() or not os.access(probe, os.W_OK)):
        raise PlannerError(f"{flag} {out}: {probe} is not a writable directory")
    _probe_write(probe, out, flag)
    return out


def _probe_write(folder: Path, target: Path, flag: str) -> None:
    """Create and drop a temporary file in ``folder``: permission bits do not tell for root, /proc or
    a read-only mount, trying does (nothing is left behind)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write in {folder} ({err.strerror or err})") from None
