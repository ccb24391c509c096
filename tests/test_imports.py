"""User import strings: the working directory is importable from, but only behind the rest
of ``sys.path`` and only while the one import runs; spawn'd workers can still import the
same modules."""

import subprocess
import sys
import textwrap

import pytest

from mptrain import imports
from mptrain.imports import load_object, user_import_path


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A working directory that is not on sys.path, and no trace of it left afterwards."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(work))])
    monkeypatch.setattr(imports, "_USER_FOLDERS", [])
    before = set(sys.modules)
    yield work
    for name in set(sys.modules) - before:
        if name.startswith("mptrain_here_"):
            del sys.modules[name]


def test_the_working_directory_is_last_on_the_path_and_only_during_the_import(here):
    (here / "mptrain_here_path.py").write_text(
        "import sys\nPATH_DURING_IMPORT = list(sys.path)\ndef make():\n    return 1\n")
    before = list(sys.path)
    make = load_object("mptrain_here_path:make", "--model")
    assert make() == 1
    during = sys.modules["mptrain_here_path"].PATH_DURING_IMPORT
    assert during == before + [str(here)]
    assert sys.path == before


def test_a_file_in_the_working_directory_never_shadows_a_module_elsewhere(here, tmp_path):
    installed = tmp_path / "site"
    installed.mkdir()
    for folder, said in ((installed, "installed"), (here, "working directory")):
        (folder / "mptrain_here_shadow.py").write_text(f"def make():\n    return {said!r}\n")
    sys.path.append(str(installed))
    assert load_object("mptrain_here_shadow:make", "--model")() == "installed"


def test_a_failed_import_leaves_the_path_as_it_was(here):
    (here / "mptrain_here_broken.py").write_text("raise RuntimeError('broken')\n")
    before = list(sys.path)
    with pytest.raises(imports.UserError, match="RuntimeError: broken"):
        load_object("mptrain_here_broken:make", "--model")
    assert sys.path == before and imports._USER_FOLDERS == []


def test_workers_get_the_folder_only_while_they_start(here):
    (here / "mptrain_here_start.py").write_text("def make():\n    return 1\n")
    before = list(sys.path)
    load_object("mptrain_here_start:make", "--model")
    with user_import_path():
        assert sys.path == before + [str(here)]
    assert sys.path == before


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_spawned_workers_import_a_model_module_from_the_working_directory(tmp_path):
    """As the ``mptrain`` script runs: its own folder, not the working directory, leads
    sys.path."""
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    (work / "mptrain_here_nets.py").write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Net(nn.Module):   # spawn'd workers unpickle it: they import this module
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(1, 1)

            def forward(self, x):
                return self.linear(x)

        def make():
            return Net()
        """))
    script = bin_dir / "mptrain_script.py"
    script.write_text("import sys\nfrom mptrain.cli import main\n\n"
                      "if __name__ == \"__main__\":\n    sys.exit(main())\n")
    done = subprocess.run(
        [sys.executable, str(script), "run", "--data", "linreg", "--model",
         "mptrain_here_nets:make", "--strategy", "sync", "--workers", "2", "--start-method",
         "spawn", "--epochs", "1", "--quiet"],
        cwd=work, capture_output=True, text=True, timeout=140)
    assert done.returncode == 0, done.stderr
