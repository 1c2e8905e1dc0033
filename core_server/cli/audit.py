"""`streameval audit ...`: checks of an adapter's honesty (docs/robustness.md)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer

from streameval.core.cli.common import StoreOption, console, fail
from streameval.core.run.exit_codes import EXIT_INTERRUPTED
from streameval.core.store.locations import default_cache_dir, resolve_store_url
from streameval.errors import UserError

audit_app = typer.Typer(help="Audit an adapter: causality.", no_args_is_help=True)

# `audit causality` exits 0 when the adapter passes, 1 when it fails or the audit is
# inconclusive, and EXIT_CANNOT_START (2) when the audit could not run, as `run` does.
EXIT_PASS, EXIT_NOT_PASSED = 0, 1


@audit_app.command()
def causality(
    adapter_url: Annotated[
        str, typer.Option("--adapter-url", help="Adapter endpoint ws://host:port/ws.")
    ],
    store: StoreOption = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Where the audit's videos and frames are cached.")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the videos and the marker word, to reproduce an audit (default: a "
            "new random seed, recorded with the verdict).",
            min=0,
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight.", min=1)] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Check that nothing the adapter says before a cut time T depends on the video after T.

    Streams new videos that differ only after T (a code word appears in one) as three
    ordinary runs, and stores the verdict with each (docs/robustness.md). Exit status: 0
    pass, 1 fail or inconclusive, 2 the audit could not run (unreachable adapter, bad store).
    """
    from pydantic import ValidationError

    from streameval.core.analyses import causality_audit, causality_streams
    from streameval.core.cli.progress_display import progress_display
    from streameval.core.store.store import Store

    cache = cache_dir or default_cache_dir()
    streams = None
    try:
        with Store(resolve_store_url(store, cache_dir)) as opened:
            chosen = causality_streams.new_seed() if seed is None else seed
            streams = causality_streams.prepare(cache, chosen)
            config = causality_audit.run_config(streams, adapter_url, cache, concurrency)
            with progress_display(console, not as_json) as shown:
                runs = asyncio.run(causality_audit.run_groups(streams, config, opened, shown))
            verdict = causality_audit.analyse(opened, runs, streams)
            causality_audit.store_verdict(opened, verdict)
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValidationError as exc:  # the options, as RunConfig validates them
        raise fail(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
    except KeyboardInterrupt:
        console.print("interrupted: the audit's runs are incomplete and have no verdict")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        if streams is not None:
            causality_audit.discard_videos(streams)
    if as_json:
        print(json.dumps({"store": opened.url, **verdict.model_dump(mode="json")}), flush=True)
    else:
        print(verdict.summary())
        print(f"rule: {verdict.rule.statement}")
        print(f"runs {', '.join(verdict.runs.values())}, store {opened.url}")
    raise typer.Exit(EXIT_PASS if verdict.verdict == "pass" else EXIT_NOT_PASSED)
