"""python -m lazytrace: the command line (lazytrace/cli.py)."""
from .cli import main

raise SystemExit(main())
