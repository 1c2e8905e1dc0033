"""streameval: condition-aware evaluation of streaming video understanding.

Everything installs under this one name, mapped from the repository's folders:
`streameval.core` (core_server/: the Core), `streameval.adapters` (adapters/: the wire
protocol, the adapter SDK and the adapters) and `streameval.scorer` (scorer/: metrics,
judges, results API, dashboard); `streameval.cli` composes the one `streameval` command
from the Core's commands and the scorer's. Importing this package imports nothing else, so
an adapter author's `from streameval.adapters.sdk import Adapter` pulls in the SDK alone.
"""

__version__ = "0.1.0"
