from imagebuild.cli import main

raise SystemExit(main())
