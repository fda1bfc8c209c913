"""Whole libraries, lazily traced: proxy modules and classes (proxy.py), the import hook (enable.py)."""
from .enable import Enabled, disable, enable
from .proxy import ModuleProxy, TracedLibrary

__all__ = ["enable", "disable", "Enabled", "ModuleProxy", "TracedLibrary"]
