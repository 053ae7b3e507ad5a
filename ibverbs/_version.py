"""The installed distribution's version, as ``__version__`` (the seed had
this module too)."""


def _installed_version() -> str:
    try:
        from importlib.metadata import version
        return version("ibverbs")
    except Exception:  # not installed (running from a source tree)
        return "0+unknown"


__version__ = _installed_version()
