"""`python -m suite.distributed`: torchrun around pytest on this node (launch.main)."""

from suite.distributed.launch import main

raise SystemExit(main())
