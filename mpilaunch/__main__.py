from mpilaunch.cli import main

raise SystemExit(main())
