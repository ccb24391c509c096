"""Data and model factories for fault tests: the model misbehaves on request."""
import multiprocessing
import os
import resource
import signal
import threading
import time
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

DIR = Path(os.environ["FAULT_DIR"])
FAULT = os.environ.get("FAULT", "")          # raise exit3 sigkill sigsegv hang native-hang
MODE = os.environ.get("FAULT_MODE", "once")   # once: one worker of the whole run; always
GATE = os.environ.get("FAULT_GATE")           # misbehave only once this file exists
FAULT_STEP = int(os.environ.get("FAULT_STEP", "0"))  # this worker's forward call number
STEP_DELAY = float(os.environ.get("STEP_DELAY", "0"))


def make_data():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(512, 1, 8, 8, generator=generator)
    targets = torch.randint(0, 10, (512,), generator=generator)
    return TensorDataset(inputs, targets), None


def make_model():
    return FaultyNet()


class FaultyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
        self.steps = 0

    def forward(self, x):
        # The parent runs the model once too (a shape check): only workers misbehave.
        if multiprocessing.parent_process() is not None:
            if self.steps == 0:
                _write(DIR / f"started-{os.getpid()}", f"{time.time()!r}\n")
            if FAULT and self.steps == FAULT_STEP and _my_turn():
                _misbehave()
            self.steps += 1
            if STEP_DELAY:
                time.sleep(STEP_DELAY)  # keeps the run going until the test acts
        return self.body(x)


def _my_turn():
    if MODE == "always":
        return True
    try:  # exactly one worker of the whole run, restarts included, claims the fault
        os.close(os.open(DIR / "fault-claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def _misbehave():
    if GATE:
        deadline = time.monotonic() + 60
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.01)
    if FAULT == "native-hang":
        _deadlock_in_native_code()
    _write(DIR / f"fault-{os.getpid()}", f"{time.time()!r}\n")
    if FAULT == "raise":
        raise RuntimeError(f"injected fault in pid {os.getpid()}")
    if FAULT == "exit3":
        os._exit(3)
    if FAULT == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if FAULT == "sigsegv":
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
        os.kill(os.getpid(), signal.SIGSEGV)
    if FAULT == "hang":
        threading.Event().wait()


def _deadlock_in_native_code():
    """Block the main thread in a futex that no signal handler can interrupt (as a
    deadlocked native library would); a helper thread writes the fault marker once the
    main thread has been asleep there for a while."""
    import ctypes

    main = threading.get_native_id()
    threading.Thread(target=_announce_when_asleep, args=(main,), daemon=True).start()
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER (glibc)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


def _announce_when_asleep(tid):
    stat, asleep_since = f"/proc/self/task/{tid}/stat", None
    while True:
        with open(stat) as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        now = time.monotonic()
        asleep_since = (asleep_since or now) if state == "S" else None
        if asleep_since is not None and now - asleep_since > 0.3:
            _write(DIR / f"fault-{os.getpid()}", f"{time.time()!r}\n")
            return
        time.sleep(0.01)


def _write(path, text):
    with open(str(path) + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(str(path) + ".tmp", path)  # readers never see a half-written marker
