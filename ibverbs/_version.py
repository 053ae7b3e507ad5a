"""The installed distribution's version, as ``__version__`` (the seed had
this module too)."""

#: The distribution this package is installed as: the import name is
#: ``ibverbs``, the distribution ``pyibverbs`` (on the public index the
#: project ``ibverbs`` is another package, ibverbs 2026.7.18 and its
#: nightlies).
DISTRIBUTION = "pyibverbs"


def _installed_version() -> str:
    try:
        from importlib.metadata import version
        return version(DISTRIBUTION)
    except Exception:  # not installed (running from a source tree)
        return "0+unknown"


__version__ = _installed_version()
