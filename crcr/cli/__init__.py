"""The ``crcr`` command line. Subcommands live one per module and load lazily."""
