"""python -m ibverbs {devices,info,ping}: see ibverbs._cli."""
from ibverbs._cli import main

raise SystemExit(main())
