"""`python -m a2a_acp_bridge` runs the command line."""

from a2a_acp_bridge.cli import main

raise SystemExit(main())
