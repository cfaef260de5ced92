from parallax.native.lifeline import die_with_runner

die_with_runner()  # a benchmark cell: die with the runner (before the slow imports)

from parallax.cli import entry  # noqa: E402

entry()
