"""The ``mptrain`` command group; each sub-command lives in its own module and registers here."""

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mptrain")
def cli():
    """Train PyTorch models with several processes on one machine."""
