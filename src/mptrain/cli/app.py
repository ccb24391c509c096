"""The ``mptrain`` command group; each sub-command lives in its own module and registers here."""

import click

from .. import __version__
from ..errors import did_you_mean


class Choice(click.Choice):
    """click's choice of names, whose refusal of a misspelt one (``--strategy hogwlid``)
    says which was meant, as every other refusal of a name does."""

    def convert(self, value, param, ctx):
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as refused:
            hint = did_you_mean(value, self.choices)
            if not hint:
                raise
            self.fail(refused.message.rstrip(".") + hint, param, ctx)


class NonEmptyValues(click.Command):
    """A command that refuses an empty option value (``--out ""``: a shell variable that
    was not set). click passes it on as given, and the commands read an empty string as
    the option left out: outputs written into the working folder, a run started afresh
    instead of resumed, the built-in data trained on."""

    def invoke(self, ctx):
        for param in self.get_params(ctx):
            value = ctx.params.get(param.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, str) and not v.strip() for v in values):
                raise click.BadParameter("it is empty; give a value or leave the option "
                                         "out", ctx=ctx, param=param)
        return super().invoke(ctx)


# The version from the package itself, not its installed metadata: a source checkout on
# PYTHONPATH (as on a machine where nothing may be installed) answers --version too.
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="mptrain")
def cli():
    """Train PyTorch models with several processes on one machine."""


cli.command_class = NonEmptyValues


def supervised_run_options(who: str, units: str):
    """The options every training command shares -- supervision, checkpoints, resume and
    outputs -- worded for its processes (``who``: worker, actor) and units of work."""
    options = [
        click.option("--worker-timeout", type=float,
                     help=f"Seconds without progress before {'an' if who[0] in 'aeiou' else 'a'}"
                          f" {who} counts as hung (300)."),
        click.option("--checkpoint-every", type=int,
                     help=f"Write an atomic checkpoint to --out every N {units} (and at the "
                          "end)."),
        click.option("--max-restarts", type=int,
                     help=f"Restart failed {who}s from the last checkpoint up to N times (0)."),
        click.option("--resume", type=click.Path(),
                     help="Continue the run whose --out folder (or checkpoint file) this is."),
        click.option("--out",
                     help="Write summary.json, metrics.jsonl, model.pt, curves.png here."),
        click.option("--overwrite", is_flag=True, default=None,
                     help="Replace the outputs of another run in --out (refused otherwise: "
                          "--resume continues a run)."),
        click.option("--quiet", "-q", is_flag=True, default=None,
                     help="Print only errors and the notes a run must not hide (a "
                          "restart, a fallback, a round that changed nothing), on stderr."),
        click.option("--logger", "logger", multiple=True,
                     help="Experiment trackers that get every round live: tensorboard, "
                          "mlflow, wandb, csv (comma-separated or repeated; each needs its "
                          "extra, e.g. pip install 'mptrain[tensorboard]')."),
        click.option("--tb-dir", type=click.Path(file_okay=False),
                     help="--logger tensorboard: write the event files here (default: "
                          "--out/tb)."),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command
    return apply


def joined_loggers(values) -> str | None:
    """``--logger`` given several times (``--logger tensorboard --logger csv``) as one
    comma-separated value; None when not given."""
    return ",".join(values) if values else None
