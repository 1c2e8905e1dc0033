"""The dashboard: a single-page app (static/, plain HTML, CSS and JavaScript, no build step)
that the results API serves under /ui/, and the helpers behind the endpoints it adds to the
API: live run progress (progress.py), frame thumbnails from the frame cache (frames.py) and
the metric glossary behind its hover text (help.py).
The same page, with its data inlined, is the static report (scorer/service/html_report.py).

Its helpers read the Core's store, benchmark and frame modules and the scorer's metric
glossary (scorer/metrics/explain.py).

May import: nothing beside it in service/, which imports it.
"""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
