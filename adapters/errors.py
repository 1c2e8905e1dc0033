"""The root of the adapter side's user errors: an unknown adapter, a bad option or config,
a model that cannot load. Importing it pulls in nothing of the Core or the scorer."""

from streameval.errors import UserError


class AdapterSetupError(UserError):
    """An adapter that cannot be built or served as asked."""


class ModelLoadError(AdapterSetupError):
    """The configured model cannot be loaded or is not a supported kind."""
