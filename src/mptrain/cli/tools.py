"""``mptrain devices`` and ``mptrain doctor``: what this machine offers, and what is wrong."""

from __future__ import annotations

import click

from .app import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def devices(as_json):
    """CPUs, memory, /dev/shm, open-file limit, torch, start methods, CUDA devices."""
    from rich.console import Console

    from ..devices import collect_device_report, format_device_report
    from ..report.outputs import json_text

    report = collect_device_report()
    if as_json:
        click.echo(json_text(report, indent=2))
    else:
        Console().print(format_device_report(report))


@cli.command()
@click.option("--clean", is_flag=True,
              help="Remove what dead runs of yours left behind (never live ones, never other "
                   "users' files).")
@click.option("--out", type=click.Path(exists=True, file_okay=False),
              help="Also look for temp files of interrupted writes in this --out folder.")
def doctor(clean, out):
    """Check /dev/shm, open-file limit, start methods, CUDA, and what dead runs left behind:
    shared-memory segments, rendezvous folders, temp files in --out."""
    from rich.console import Console

    from ..doctor import find_all, run_checks
    from ..leftovers import clean as clean_leftovers

    console = Console(highlight=False, soft_wrap=True)
    marks = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]",
             "fail": "[red]FAIL[/red]"}
    checks = run_checks(out=out)
    for check in checks:
        console.print(f"{marks[check.status]} {check.name}: {check.detail}")
        if check.advice:
            console.print(f"     -> {check.advice}")
    if clean:
        for line in clean_leftovers(find_all(out=out)).lines():
            console.print(line)
    if any(check.status == "fail" for check in checks):
        raise click.exceptions.Exit(1)
