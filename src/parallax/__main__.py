from parallax.cli import entry

entry()
