"""What dead runs leave behind, and removing it without touching anything else.

- Shared-memory segments in ``/dev/shm`` named after the process that made them: torch's
  (``torch_<pid>_...``, file_system sharing; torch_shm_manager unlinks them unless it was
  SIGKILLed) and the node buffers of torchrun's ranks (``mptrain-node-<pid>-...``).
- Rendezvous folders of mptrain's own gloo/nccl groups (``mptrain-rendezvous-<pid>-...`` in
  the temp folder), left when the parent was SIGKILLed.
- Folders of ``mptrain bench``'s timed runs (``mptrain-bench-<pid>-...`` in the temp
  folder: the run's outputs), left when the bench was SIGKILLed.
- Temp files of atomic writes (``.<name>.<random>.tmp``) in an ``--out`` folder, left when
  the writer was killed between creating and renaming one, and a federated run's scratch
  state there (:data:`SCRATCH_FILES`), which it removes as it ends unless it was killed.

Whatever a process here maps or holds open is in use, whoever created it: torch's
``file_system`` segments outlive their creator in the processes it shared them with (a
DataLoader worker's batch in the main process), and another process that attaches one later
needs its name.

Only what the caller owns is ever removed: other users' files are reported, not touched (in
``/dev/shm`` the sticky bit forbids it anyway). A pid in a name is the creator's in its own
PID namespace -- a container that shares ``/dev/shm`` has its own pids, alive while no such
pid exists here -- so a leftover must also be older than :data:`MIN_AGE_S`. Nothing is
followed through a symbolic link.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SHM_DIR = Path("/dev/shm")
#: Segments named after the process that created them (group 1: its pid).
SEGMENT = re.compile(r"^(?:torch_|mptrain-node-)(\d+)[_-]")
#: Rendezvous folders of mptrain's own groups (``comm.dist.DistSpec``).
RENDEZVOUS_PREFIX = "mptrain-rendezvous-"
RENDEZVOUS = re.compile(rf"^{RENDEZVOUS_PREFIX}(\d+)-")
#: Folders of ``mptrain bench``'s timed runs (``bench.execute``), named after the bench.
BENCH_PREFIX = "mptrain-bench-"
BENCH_FOLDER = re.compile(rf"^{BENCH_PREFIX}(\d+)-")
#: A federated run's state of its clients under --out, beyond what shared memory holds:
#: personalization's rows (``federated.personal.store``) and SCAFFOLD's client variates
#: (``strategies.fedavg.shared``). Scratch: a checkpoint holds every row, and a resume
#: makes them afresh, so ``--overwrite`` and ``doctor --clean`` remove them too.
PERSONAL_STATE_FILE = "personal-state.f32"
CLIENT_CONTROLS_FILE = "scaffold-client-controls.f32"
SCRATCH_FILES = (PERSONAL_STATE_FILE, CLIENT_CONTROLS_FILE)
#: Temp files of ``files.atomic_write``, the probe of ``report.outputs.prepare_out_dir``,
#: and the scratch state above.
TEMP_FILE = re.compile(r"^\..+\.tmp$|^\.mptrain-probe-|^(?:"
                       + "|".join(re.escape(name) for name in SCRATCH_FILES) + ")$")
#: Untouched for this long before anything counts as left behind (seconds): a run in
#: another PID namespace writes its files within moments of creating them, and a temp file
#: lives while one output is written.
MIN_AGE_S = 600.0


@dataclass(frozen=True)
class Leftover:
    path: Path
    pid: int | None   # the creator named in the path (None: none named)
    size: int
    owner: int        # uid

    @property
    def is_mine(self) -> bool:
        return self.owner == current_uid()


@dataclass
class Cleanup:
    """What :func:`clean` did: removed what it could, left the rest and says why."""

    removed: int = 0
    freed: int = 0
    others: list[Leftover] = field(default_factory=list)     # other users': left alone
    failed: list[tuple[Path, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        said = [f"removed {self.removed} leftover(s), {self.freed / 2**20:.1f} MiB freed"]
        if self.others:
            owners = sorted({item.owner for item in self.others})
            said.append(f"left {len(self.others)} leftover(s) of other users alone (uid "
                        f"{', '.join(map(str, owners))}); they or root can remove them")
        if self.failed:
            path, reason = self.failed[0]
            more = f" and {len(self.failed) - 1} more" if len(self.failed) > 1 else ""
            said.append(f"could not remove {path} ({reason}){more}")
        return said


def current_uid() -> int:
    return os.getuid()


def find_segments(shm_dir: str | Path | None = None, pattern: re.Pattern = SEGMENT,
                  min_age_s: float = MIN_AGE_S) -> list[Leftover]:
    """Segments in ``shm_dir`` (/dev/shm; matching ``pattern``, group 1 the creator's pid)
    whose creator is gone and that are at least ``min_age_s`` old: the caller's and
    others'."""
    return _find(Path(shm_dir or SHM_DIR), pattern, min_age_s, stat.S_ISREG)


def find_rendezvous(folder: str | Path | None = None,
                    min_age_s: float = MIN_AGE_S) -> list[Leftover]:
    """Rendezvous folders of dead runs in the temp folder (or ``folder``)."""
    return _find(Path(folder or tempfile.gettempdir()), RENDEZVOUS, min_age_s, stat.S_ISDIR)


def find_bench_folders(folder: str | Path | None = None,
                       min_age_s: float = MIN_AGE_S) -> list[Leftover]:
    """Folders of timed runs whose ``mptrain bench`` is gone, in the temp folder (or
    ``folder``)."""
    return _find(Path(folder or tempfile.gettempdir()), BENCH_FOLDER, min_age_s, stat.S_ISDIR)


def find_temp_files(out: str | Path, min_age_s: float = MIN_AGE_S) -> list[Leftover]:
    """Temp files of interrupted atomic writes, and a killed federated run's scratch
    state, in an --out folder."""
    return _find(Path(out), TEMP_FILE, min_age_s, stat.S_ISREG)


def clean(leftovers: list[Leftover]) -> Cleanup:
    """Remove the caller's leftovers, checking each again first (a pid may have come back);
    never raises for one that cannot go."""
    done = Cleanup()
    used = paths_in_use({item.path.parent for item in leftovers})
    for item in leftovers:
        try:
            now = os.lstat(item.path)
        except FileNotFoundError:
            continue
        except OSError as err:
            done.failed.append((item.path, err.strerror or str(err)))
            continue
        if now.st_uid != current_uid():
            done.others.append(Leftover(item.path, item.pid, item.size, now.st_uid))
            continue
        if item.pid is not None and psutil.pid_exists(item.pid):
            continue
        if _in_use(item.path, used):
            continue
        try:
            if stat.S_ISDIR(now.st_mode):
                shutil.rmtree(item.path)
            else:
                os.unlink(item.path)
        except FileNotFoundError:
            continue
        except OSError as err:   # PermissionError among them: a folder not ours to change
            done.failed.append((item.path, err.strerror or str(err)))
            continue
        done.removed += 1
        done.freed += item.size
    return done


def _find(folder: Path, pattern: re.Pattern, min_age_s: float, kind) -> list[Leftover]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    found, now = [], time.time()
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None:
            continue
        pid = int(match.group(1)) if match.groups() and match.group(1) else None
        if pid is not None and psutil.pid_exists(pid):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not kind(info.st_mode) or now - info.st_mtime < min_age_s:
            continue
        found.append(Leftover(Path(entry.path), pid, info.st_size, info.st_uid))
    used = paths_in_use({folder}) if found else set()
    return sorted((item for item in found if not _in_use(item.path, used)),
                  key=lambda item: item.path.name)


def paths_in_use(folders, proc: str | Path = "/proc") -> set[str]:
    """Paths under ``folders`` that a process visible here maps or holds open (from
    ``/proc/<pid>/maps`` and ``/proc/<pid>/fd``; processes this user may not inspect are
    passed over: what they hold is not this user's to remove)."""
    prefixes = tuple(os.path.realpath(folder).rstrip("/") + "/" for folder in folders)
    used: set[str] = set()
    if not prefixes:
        return used
    try:
        processes = [entry.path for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return used
    for process in processes:
        try:
            with open(os.path.join(process, "maps"), encoding="utf-8",
                      errors="surrogateescape") as maps:
                for line in maps:
                    where = line.find("/")   # the path, when the mapping has one
                    if where >= 0 and line.startswith(prefixes, where):
                        used.add(line[where:].rstrip("\n"))
        except OSError:
            pass
        try:
            descriptors = list(os.scandir(os.path.join(process, "fd")))
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor.path)
            except OSError:
                continue
            if target.startswith(prefixes):
                used.add(target)
    return used


def _in_use(path: Path, used: set[str]) -> bool:
    """Is ``path``, or for a folder anything in it, in ``used``?"""
    real = os.path.realpath(path)
    return real in used or any(item.startswith(real + "/") for item in used)
