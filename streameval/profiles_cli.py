"""`streameval profiles`: both kinds of profile, each under its own heading. A protocol
profile (core_server/config.py) is how a run streams the video, a scoring profile
(scorer/profiles.py) how a run is scored; `--profile` takes the one in `run` and the other
in `score`. Listing both needs the Core and the scorer, so it lives above both."""

from __future__ import annotations

import json
from typing import Annotated

import typer


def profiles(
    as_json: Annotated[
        bool,
        typer.Option("--json", help='Print {"protocol": [...], "scoring": [...]} as JSON.'),
    ] = False,
) -> None:
    """The protocol profiles `run` takes and the scoring profiles `score` takes
    (docs/protocol.md, docs/metrics.md)."""
    from rich.console import Console

    from streameval.core.config import PROFILE_KINDS, PROTOCOL_PROFILES
    from streameval.scorer.profiles import SCORING_PROFILES
    from streameval.scorer.report import profile_report
    from streameval.terminal import Column, print_table

    if as_json:
        protocol = [p.model_dump(mode="json") for p in PROTOCOL_PROFILES.values()]
        scoring = [profile_report(p).model_dump(mode="json") for p in SCORING_PROFILES.values()]
        print(json.dumps({"protocol": protocol, "scoring": scoring}))
        return
    # A description squeezed narrower than this is a wall of short lines: blocks instead.
    what = Column("what", min_width=40, paragraph=True)
    out = Console()
    print_table(
        out,
        [
            Column("profile", key=True),
            Column("fps", justify="right"),
            Column("QA history", justify="right"),
            Column("proactive lead", justify="right"),
            Column("pacing"),
            what,
        ],
        [
            [
                profile.name,
                f"{profile.fps:g}",
                f"{profile.qa_history_s:g} s" if profile.qa_history_s else "all",
                f"{profile.proactive_lead_s:g} s" if profile.proactive_lead_s else "all",
                profile.pacing or "any",
                profile.description,
            ]
            for profile in PROTOCOL_PROFILES.values()
        ],
        title=f"Protocol profiles (for {PROFILE_KINDS['protocol']}): how a run streams the video",
    )
    out.print()
    print_table(
        out,
        [Column("profile", key=True), Column("version"), Column("for protocols"), what],
        [
            [profile.name, profile.version, ", ".join(profile.protocols), profile.description]
            for profile in SCORING_PROFILES.values()
        ],
        title=f"Scoring profiles (for {PROFILE_KINDS['scoring']}): how a run is scored",
    )
