from verify.importer import main

raise SystemExit(main())
