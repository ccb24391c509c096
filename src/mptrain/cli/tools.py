"""``mptrain devices`` and ``mptrain doctor``: what this machine offers, and what is wrong."""

from __future__ import annotations

import json

import click

from .app import cli


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def devices(as_json):
    """CPUs, memory, /dev/shm, open-file limit, torch, start methods, CUDA devices."""
    from rich.console import Console

    from ..devices import collect_device_report, format_device_report

    report = collect_device_report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        Console().print(format_device_report(report))


@cli.command()
@click.option("--clean", is_flag=True,
              help="Remove shared-memory segments left by dead runs (never live ones).")
def doctor(clean):
    """Check /dev/shm, open-file limit, start methods, CUDA and leftover segments."""
    from rich.console import Console

    from ..doctor import clean_leftovers, find_leftovers, run_checks

    console = Console(highlight=False, soft_wrap=True)
    marks = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]",
             "fail": "[red]FAIL[/red]"}
    checks = run_checks()
    for check in checks:
        console.print(f"{marks[check.status]} {check.name}: {check.detail}")
        if check.advice:
            console.print(f"     -> {check.advice}")
    if clean:
        removed, freed = clean_leftovers(find_leftovers())
        console.print(f"removed {removed} leftover segment(s), {freed / 2**20:.1f} MiB freed")
    if any(check.status == "fail" for check in checks):
        raise click.exceptions.Exit(1)


