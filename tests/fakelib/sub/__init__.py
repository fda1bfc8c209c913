from .deep import halve, probe_imports
