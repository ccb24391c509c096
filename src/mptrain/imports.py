"""Imports: user import strings such as ``my_pkg.my_mod:make_model`` or
``./nets.py:make_model``, and the lazy exports of mptrain's packages."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError, raised_by_users_code

#: Folders put on ``sys.path`` for a user's import string that imported (the working
#: directory): spawn'd workers import the same modules again, from there
#: (:func:`user_import_path`).
_USER_FOLDERS: list[str] = []
#: Modules of user files loaded by path (``file.py:make``), by the names they were given.
_USER_FILES: dict[str, str] = {}


def is_import_string(text: str) -> bool:
    return ":" in text


def colon_hint(text) -> str:
    """`` (did you mean 'mypkg.stuff:make'?)`` for ``mypkg.stuff.make``: a dotted name
    where an import string was wanted, its last dot meant as the colon that separates the
    module from the function; ``""`` for anything else (a path, a name without a dot)."""
    if not isinstance(text, str) or ":" in text or text.endswith(".py"):
        return ""
    module, _, attribute = text.rpartition(".")
    if not module or not all(part.isidentifier() for part in text.split(".")):
        return ""
    return f" (did you mean {module + ':' + attribute!r}?)"
#: ``--data`` values of natural data (``data.sources``: a LEAF folder, a Hugging Face set,
#: FedProx's generator): read as data before any import string, so they never name code.
#: ``synthetic-iid:`` takes no parameters, but no module is named so: the reader says so.
NATURAL_DATA_PREFIXES = ("leaf:", "hf:", "synthetic:", "synthetic-iid:")


def can_name_code(text: str) -> bool:
    """Whether ``text`` can name a function: ``module:attribute`` (or ``file.py:attribute``)
    whose attribute is a dotted name. ``dirichlet:0.3`` cannot: a built-in with a
    parameter, not code of the user's."""
    module, _, attribute = text.partition(":")
    if "<" in attribute:   # a lambda's name says where it is: <lambda>@train.py:12
        attribute = attribute.partition("@")[0]
    return bool(module) and all(part.isidentifier() or part in _UNNAMED
                                for part in attribute.split("."))


#: The parts of a qualified name Python gives functions without a name of their own
#: (``fit(partition=lambda ...)`` goes by ``__main__:<lambda>@file.py:LINE``, see
#: ``data.user_partitions.given_function``): still the user's code.
_UNNAMED = ("<lambda>", "<locals>")


def import_name(function) -> str:
    """``module:qualified_name``: what a function given from Python (``fit(transform=fn)``)
    goes by in the run's settings, the import string it would have on the command line."""
    qualname = getattr(function, "__qualname__", type(function).__name__)
    return f"{getattr(function, '__module__', None) or 'python'}:{qualname}"


def unimportable_where(module: str, qualname: str) -> str | None:
    """Why a spawn'd worker, which finds a class or a function by its module and qualified
    name, cannot import ``module:qualname`` (``"a lambda"``, ...), or None where it can.
    Refused in one line before any worker starts: the model's class, a given transform or
    collate, a streamed data set's class -- each worker died with a traceback instead."""
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        return "defined in a notebook or at the Python prompt"
    if "<lambda>" in qualname:
        return "a lambda"
    if "<locals>" in qualname:
        return "defined inside a function"
    return None


def load_object(spec: str, what: str):
    """Import ``module:attribute`` (or ``file.py:attribute``) and return the attribute.

    ``what`` names the flag in error messages (``--model``, ``--data``).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"{what} {spec!r} is not an import string{colon_hint(spec)}; write "
                        "it as 'package.module:function' or 'path/to/file.py:function'")
    if module_name.endswith(".py"):
        module = _load_file(Path(module_name), spec, what)
    else:
        try:
            module = _import_from_here(module_name)
        except ModuleNotFoundError as err:
            raise UserError(f"{what} {spec!r}: cannot import module {module_name!r} ({err}); "
                            "check the spelling and that it is on PYTHONPATH") from None
        except Exception as err:  # the user's module raised while importing
            raise UserError(f"{what} {spec!r}: importing {module_name!r} raised "
                            f"{type(err).__name__}: {err}") from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UserError(f"{what} {spec!r}: module {module_name!r} has no attribute "
                            f"{attr!r}") from None
    if not callable(obj):
        raise UserError(f"{what} {spec!r} is not callable; it must name a factory function")
    return obj


def call_factory(spec: str, what: str, *args):
    """``load_object(spec, what)`` called with ``args``; what the factory raises is one
    line naming the flag (``errors.raised_by_users_code``)."""
    factory = load_object(spec, what)
    with raised_by_users_code(f"{what} {spec!r}: the factory"):
        return factory(*args)


def _import_from_here(module_name: str):
    """Import ``module_name``, letting users name modules in the directory they run from
    (as ``python -m`` does) -- but behind every other place on ``sys.path``, so a file there
    never shadows an installed module, and for this import only."""
    here = str(Path.cwd())
    if "" in sys.path or here in sys.path:
        return importlib.import_module(module_name)
    with _appended_to_path([here]):
        module = importlib.import_module(module_name)
    if here not in _USER_FOLDERS:
        _USER_FOLDERS.append(here)
    return module


@contextmanager
def user_import_path():
    """Within the block, ``sys.path`` ends with the folders user import strings were
    imported from: a spawn'd worker starts with its parent's ``sys.path`` and imports the
    user's modules again when it unpickles the model."""
    with _appended_to_path(_USER_FOLDERS):
        yield


class UserFiles:
    """The user's files loaded by path, for workers that are not forked.

    Such a file is a module under a made-up name (``mptrain_user_<stem>_<hash>``) that no
    other process can import, yet a model of a class defined there pickles as a reference
    to it. Pickled ahead of the model (the supervisor puts it first among a worker's
    arguments), unpickling this registers the files in the worker first: the model's class
    then imports. Only the paths travel, from the parent; no file names what is run."""

    def __init__(self, files: dict[str, str]):
        self.files = dict(files)

    def __reduce__(self):
        return _register_user_files, (self.files,)


def user_files() -> UserFiles:
    return UserFiles(_USER_FILES)


class _UserFileFinder:
    """Imports the registered user files by their made-up names (on ``sys.meta_path``)."""

    def __init__(self):
        self.files: dict[str, str] = {}

    def find_spec(self, name, path=None, target=None):
        if name not in self.files:
            return None
        return importlib.util.spec_from_file_location(name, self.files[name])


_FINDER = _UserFileFinder()


def _register_user_files(files: dict[str, str]) -> UserFiles:
    _FINDER.files.update(files)
    if files and _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
    return UserFiles(files)


@contextmanager
def _appended_to_path(folders):
    added = [folder for folder in folders if folder not in sys.path]
    sys.path.extend(added)
    try:
        yield
    finally:
        for folder in added:
            if folder in sys.path:
                # The last occurrence is the one appended here.
                del sys.path[len(sys.path) - 1 - sys.path[::-1].index(folder)]


def _load_file(path: Path, spec: str, what: str):
    if not path.is_file():
        raise UserError(f"{what} {spec!r}: file {path} does not exist")
    # Named after the full path: two files called nets.py in different folders stay apart.
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    name = f"mptrain_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # pickles refer to its functions and classes by this name
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise UserError(f"{what} {spec!r}: running {path} raised "
                        f"{type(err).__name__}: {err}") from None
    _USER_FILES[name] = str(path.resolve())  # workers not forked import it (UserFiles)
    return module


def lazy_exports(package: str, homes: dict[str, str]):
    """``__getattr__`` and ``__dir__`` for a package whose public names (name -> module,
    relative to ``package``) are imported on first use (PEP 562).

    ``import mptrain`` must not import torch: the ``mptrain`` command imports the package
    before it parses its flags, and a second of torch import is a second that ``--help``, a
    refused flag, or the MNIST files read meanwhile do not need to wait for.
    """
    def __getattr__(name: str):
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        setattr(sys.modules[package], name, value)  # looked up once
        return value

    def __dir__():
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__
