"""The check every test of a user mistake makes: one line on stderr, exit 2, no traceback."""

import pytest

from mptrain.cli import main


def fail(argv, capsys):
    """Run ``main(argv)``, expecting a user error; return its one stderr line."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 2, err
    assert "Traceback" not in err
    assert err.startswith("mptrain: error: ")
    assert len(err.splitlines()) == 1, err
    assert out == ""
    return err
