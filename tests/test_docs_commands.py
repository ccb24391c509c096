"""Every shell command in README.md and docs/*.md runs as written (issue 57: a docs page's
first command failed as written, for want of ``--data-dir``).

A page's commands run one after the other in a fresh working folder of the page's own (a
resume finds the run its page wrote before it), ``mptrain`` in this process through
``cli.main`` (a torch import each would cost the suite minutes), ``torchrun`` as a process.
What changes from the page, and only that:

- sizes are cut short: ``--epochs`` 1 and ``--steps-per-epoch`` 2 (a resume: 2 epochs),
  fedavg's and fedbuff's ``--rounds`` 1 (a resume: 2) of ``--local-epochs`` 1 and at most
  100 ``--clients``, 20 a round; RL's ``--steps`` 1,024 in rounds of 512 (a resume: 2,048),
  ``--eval-episodes`` 2; MNIST is its first 2,000 training and 400 test images
  (``SHORT_MNIST``);
- the page's Python that reads what its commands wrote (the README's ``model.pt`` snippet)
  runs after them;
- placeholders are filled: ``leaf:DIR`` (and any ``leaf:`` path) a small LEAF folder, and
  ``hf:path/to/saved`` a small ``save_to_disk`` folder, both written in the page's folder;
  ``DIR`` after ``--data-dir`` is that MNIST, cut from the files
  in ``/work/shared/data/mnist`` or ``$MPTRAIN_MNIST_DIR`` (without them those commands are
  skipped), any other ``DIR`` a folder; ``[--json]`` is given; ``my_pkg`` is
  docs/usage.md's minimal pair, written out, with an environment and a network for RL.

Commands of MNIST, digits-60k and torchrun run in a second test of their page, marked
``slow``.

A command that cannot run here is in ``SKIPPED`` with the reason, and the test says so.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MNIST = Path(os.environ.get("MPTRAIN_MNIST_DIR", "/work/shared/data/mnist"))

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SHELL_BLOCKS = ("bash", "sh", "shell", "console", "")
PROGRAMS = ("mptrain", "python", "python3", "torchrun", "accelerate", ".venv/bin/")
ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$", re.S)


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


#: (pattern in the command, why it does not run here, whether that holds now).
SKIPPED = [
    (r"^python3 -m venv|pip install", "installs packages from the network", True),
    (r"-m pytest$", "the test suite itself", True),
    (r"^python benchmarks/|^accelerate launch",
     "a benchmark script: minutes a run, measured in a quiet window (docs/benchmarks.md)", True),
    (r"--clients N ", "a template: N, K, R, W, S, TMP stand for numbers and a folder", True),
    (r"^mptrain bench", "a bench's runs are processes (a minute and more, cut short): "
                        "tests/bench/test_bench_command.py runs `mptrain bench` with these flags",
     True),
    (r"--rdzv-endpoint HOST", "two machines (HOST is the first one)", True),
    (r"--device cuda", "needs a GPU", not _cuda()),
    (r"--logger \S*tensorboard", "tensorboard is not installed", not _has("tensorboard")),
    (r"--logger \S*mlflow", "mlflow is not installed", not _has("mlflow")),
    (r"--logger \S*wandb", "wandb is not installed", not _has("wandb")),
    (r"--data-dir DIR", f"no MNIST files in {MNIST}", not (MNIST / "train-labels-idx1-ubyte.gz")
     .exists() and not (MNIST / "train-labels-idx1-ubyte").exists()),
    (r"^mptrain rl", "gymnasium is not installed", not _has("gymnasium")),
    (r"--data hf:flwrlabs/", "downloads from the Hugging Face Hub (hf:path/to/saved, a "
                             "folder written here, runs the same reader)", True),
    (r"--data hf:", "datasets is not installed", not _has("datasets")),
]
#: Commands that take long even cut short (digits-60k is built and scored in full, MNIST
#: read; torchrun's ranks are processes that import torch): the page's ``slow`` test runs
#: them.
SLOW = re.compile(r"--data (mnist|digits-60k)|^torchrun")
#: MNIST cut short: the first images of the real files, as IDX files in a folder.
SHORT_MNIST = {"train": 2_000, "t10k": 400}


def shell_commands(page: Path) -> list[str]:
    """The commands of ``page``'s shell blocks, continuation lines joined, comments and
    prose (a diagram, a file tree) left out; ``NAME=value`` lines kept for what follows."""
    found = []
    for language, body in FENCE.findall(page.read_text(encoding="utf-8")):
        if language not in SHELL_BLOCKS:
            continue
        lines: list[str] = []
        for raw in body.splitlines():
            line = raw.rstrip()
            if lines and (lines[-1].endswith("\\") or re.match(r"\s+--", line)):
                lines[-1] = lines[-1].rstrip("\\").rstrip() + " " + line.strip()
            else:
                lines.append(line)
        for line in lines:
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command.startswith(PROGRAMS) or ASSIGNMENT.match(command):
                found.append(command)
    return found


def skipped(command: str) -> str | None:
    return next((why for pattern, why, holds in SKIPPED if holds and re.search(pattern, command)),
                None)


def _set(argv: list[str], flag: str, value: str, add: bool = True) -> list[str]:
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    elif add:
        argv += [flag, value]
    return argv


def shortened(argv: list[str], root: Path = Path(".")) -> list[str]:
    """``argv`` with the sizes cut short and the placeholders filled (the module's
    docstring says which; ``root``: where the short MNIST goes)."""
    for index, arg in enumerate(argv):
        if arg.startswith(("leaf:", "hf:")) and argv[index - 1] == "--data":
            argv[index] = natural_data(arg)
        elif arg == "DIR" and argv[index - 1] == "--data-dir":
            argv[index] = str(short_mnist(root))
        elif arg == "DIR":
            argv[index] = "a-folder"
            Path(argv[index]).mkdir(exist_ok=True)
    command = argv[1] if argv[0] == "mptrain" else next(
        (a for a in argv if a in ("run", "rl")), None)
    resuming = "--resume" in argv
    if command == "run":
        if "fedavg" in argv or "fedbuff" in argv:
            _set(argv, "--rounds", "2" if resuming else "1")
            # Natural data's recipe trains 20 local epochs (FedProx's): one proves as much.
            _set(argv, "--local-epochs", "1")
            for flag, most in (("--clients", 100), ("--clients-per-round", 20)):
                if flag in argv and int(argv[argv.index(flag) + 1]) > most:
                    _set(argv, flag, str(most))
        else:
            _set(argv, "--epochs", "2" if resuming else "1")
            _set(argv, "--steps-per-epoch", "2", add=not resuming)
    elif command == "rl":
        _set(argv, "--steps", "2048" if resuming else "1024")
        _set(argv, "--round-steps", "512", add=False)
        _set(argv, "--eval-episodes", "2")
    return argv


def natural_data(spec: str) -> str:
    """``leaf:DIR`` and ``hf:path/to/saved`` written small in the working folder, in the
    formats LEAF's preprocessing and ``save_to_disk`` write: a Shakespeare folder where the
    page's path names it, FEMNIST otherwise; the Hub set with the page's columns."""
    from leaf_files import femnist_user, shakespeare_user, write_leaf

    kind, _, where = spec.partition(":")
    folder = Path("leaf-femnist" if where == "DIR" else where)
    if kind == "leaf" and not folder.exists():
        write_leaf(folder, shakespeare_user if "shakespeare" in where else femnist_user)
    elif kind == "hf" and not folder.exists():
        import datasets
        import numpy as np

        rng = np.random.default_rng(0)
        datasets.Dataset.from_dict({"user": [f"u{i % 4}" for i in range(40)],
                                    "x": rng.random((40, 8)).tolist(),
                                    "y": rng.integers(0, 3, 40).tolist()}
                                   ).save_to_disk(str(folder))
    return f"{kind}:{folder}"


def short_mnist(root: Path) -> Path:
    """The first ``SHORT_MNIST`` images and labels of the MNIST files in ``MNIST``, written
    once under ``root`` (the session's temporary folder) as IDX files: the real digits, at
    a size a test can train."""
    from mptrain.data.idx import read_idx
    from mnist_files import idx_bytes, write

    folder = root / "short-mnist"
    if not folder.exists():
        for prefix, count in SHORT_MNIST.items():
            for kind in ("images-idx3", "labels-idx1"):
                name = f"{prefix}-{kind}-ubyte"
                source = MNIST / name if (MNIST / name).exists() else MNIST / f"{name}.gz"
                write(folder / name, idx_bytes(read_idx(source)[:count]))
    return folder


def write_my_pkg(folder: Path) -> None:
    """docs/usage.md's minimal ``my_pkg`` (data.py, nets.py) as the page writes it, and for
    ``mptrain rl --env my_pkg.envs:make --net my_pkg.nets:make`` an environment and an a3c
    network."""
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    block = next(body for language, body in FENCE.findall(usage) if "# my_pkg/data.py" in body)
    package = folder / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in re.findall(r"^# my_pkg/(\w+\.py)\n(.*?)(?=^# my_pkg/|\Z)", block,
                                   re.S | re.M):
        (package / name).write_text(source)
    (package / "envs.py").write_text("import gymnasium\n\n\ndef make():\n"
                                     "    return gymnasium.make('CartPole-v1')\n")
    with (package / "nets.py").open("a") as nets:
        nets.write("\n\nclass ActorCritic(nn.Module):\n"
                   "    def __init__(self, obs_dim, n_actions):\n"
                   "        super().__init__()\n"
                   "        self.body = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh())\n"
                   "        self.logits, self.value = nn.Linear(32, n_actions), nn.Linear(32, 1)\n\n"
                   "    def forward(self, obs):\n"
                   "        hidden = self.body(obs)\n"
                   "        return self.logits(hidden), self.value(hidden).squeeze(-1)\n\n\n"
                   "def make(obs_dim, n_actions):\n"
                   "    return ActorCritic(obs_dim, n_actions)\n")


def write_config_file(path: Path) -> None:
    """docs/usage.md's config file, for its ``mptrain run --config run.toml``."""
    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    path.write_text(next(body for language, body in FENCE.findall(usage) if language == "toml"))


def run_command(argv: list[str], capsys) -> tuple[int, str]:
    """``argv`` run: ``mptrain`` here through ``cli.main``, anything else as a process
    (``torchrun`` as ``python -m torch.distributed.run``)."""
    if argv[0] == "mptrain":
        from mptrain.cli import main

        capsys.readouterr()
        try:
            code = main(argv[1:])
        except SystemExit as done:
            code = done.code
        shown = capsys.readouterr()
        return (0 if code is None else code), shown.out + shown.err
    if argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    return done.returncode, done.stdout + done.stderr


def page_commands() -> list:
    """Two tests per page (quick commands, slow ones), each its commands in order, ``$F``
    expanded from the page's ``F=...``; a command an earlier page ran is not run again."""
    seen: set[str] = set()
    params = []
    for page in PAGES:
        variables: dict[str, str] = {}
        quick, slow = [], []
        for command in shell_commands(page):
            assigned = ASSIGNMENT.match(command)
            if assigned:
                variables[assigned.group(1)] = shlex.split(assigned.group(2))[0]
                continue
            if command in seen:
                continue
            seen.add(command)
            expanded = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)),
                              command)
            (slow if SLOW.search(expanded) else quick).append(expanded)
        name = str(page.relative_to(ROOT))
        if quick:
            params.append(pytest.param(page, quick, id=name))
        if slow:
            params.append(pytest.param(page, slow, id=f"{name}-slow", marks=pytest.mark.slow))
    return params


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page, commands", page_commands())
def test_every_shell_command_of_the_page_runs_as_written(page, commands, tmp_path,
                                                         tmp_path_factory, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))   # my_pkg, as from the working folder
    write_my_pkg(tmp_path)
    write_config_file(tmp_path / "run.toml")
    failed, skips, took = [], [], []
    for command in commands:
        why = skipped(command)
        if why:
            skips.append(f"{command}: {why}")
            continue
        argv = shortened(shlex.split(re.sub(r"\[(--[^]]+)]", r"\1", command)),
                         tmp_path_factory.getbasetemp())
        started = time.monotonic()
        code, output = run_command(argv, capsys)
        took.append(f"{time.monotonic() - started:5.1f} s  {' '.join(argv)}")
        if code != 0:
            failed.append(f"{' '.join(argv)} -> exit {code}:\n{output[-2000:]}")
    print("\n".join(["skipped, with the reason:", *skips, "ran:", *took]))
    assert failed == [], "\n\n".join(failed)
    for snippet in python_using_outputs(page, commands):
        exec(compile(snippet, f"{page.name}'s Python", "exec"), {})


def python_using_outputs(page: Path, commands: list[str]) -> list[str]:
    """The page's Python blocks that read what its commands wrote (``runs/a/model.pt``),
    where those commands ran."""
    blocks = [body for language, body in FENCE.findall(page.read_text(encoding="utf-8"))
              if language == "python"]
    return [body for body in blocks
            if any(m in " ".join(commands) for m in re.findall(r'"(runs/[^/"]+)/', body))]


def test_the_commands_are_found_and_shortened():
    readme = shell_commands(ROOT / "README.md")
    assert "mptrain run --strategy sync --workers 4" in readme
    assert not any(c.startswith("cli/") or "->" in c for c in
                   shell_commands(ROOT / "docs" / "architecture.md"))
    federated = shell_commands(ROOT / "docs" / "federated.md")
    assert federated[0].endswith("--workers 2 --partition iid --out runs/fl")   # joined
    assert shortened(shlex.split("mptrain rl --resume runs/dqn --steps 150000")) == \
        ["mptrain", "rl", "--resume", "runs/dqn", "--steps", "2048", "--eval-episodes", "2"]
    assert skipped("mptrain run --strategy dp --device cuda") == (
        "needs a GPU" if not _cuda() else None)
