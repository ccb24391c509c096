"""Whether a piece of mptrain imports ``torch._dynamo`` (the first ``torch.optim``
optimizer of a process does, 0.7-1.6 s here): run it in a fresh interpreter and look."""

import subprocess
import sys


def imports_dynamo(code: str, timeout_s: float) -> bool:
    """Run ``code`` in a fresh Python; whether ``torch._dynamo`` was imported by its end."""
    out = subprocess.run([sys.executable, "-c", code + "\nprint('torch._dynamo' in sys.modules)"],
                         capture_output=True, text=True, timeout=timeout_s)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-1] == "True"
