"""``python -m transduce``."""

from transduce.cli import main

raise SystemExit(main())
