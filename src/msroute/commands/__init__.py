"""Subcommands of the ``msroute`` command line, one module each (see ``msroute.cli``)."""
