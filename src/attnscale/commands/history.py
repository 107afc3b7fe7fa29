"""``attnscale history``: the history lab (C07, C10, C13 against the released code), or (``--fetch``)
fill the cache of old releases it reads, or (``--status``) say what the cache holds."""

from __future__ import annotations

import typer

from . import options


def register(app: typer.Typer) -> None:
    @app.command("history")
    def history(
        ctx: typer.Context,
        preset: options.Preset = "quick",
        seed: options.Seed = 0,
        device: options.Device = "cpu",
        as_json: bool = typer.Option(False, "--json", help="Print the full result as JSON."),
        fetch: bool = typer.Option(False, "--fetch", help="Download the pinned releases missing from the cache "
                                                          "(pip download --no-deps; nothing is installed) and stop."),
        status: bool = typer.Option(False, "--status", help="Print each release's state in the cache and stop."),
    ) -> None:
        """Run the history lab: the attention factor through the released code (tensor2tensor to transformers 4), read and run; C07, C10, C13."""
        from ..history import cache

        if fetch or status:
            options.refuse_given(ctx, "--fetch and --status only manage the cache", allowed=("fetch", "status"))
            results = cache.fetch() if fetch else cache.status()
            for item in results:
                typer.echo(f"{item.state:9} {item.release.label:32} {item.reason}")
            typer.echo(f"cache: {cache.default_cache_dir()}")
            if not all(item.usable for item in results):
                raise typer.Exit(1)
            return
        from .lab_command import run_lab_command

        cache.check_can_unpack()
        run_lab_command("history", options.preset_name(preset), seed, device, as_json, None)
