"""The ``parallax`` command line: subcommands only, each calling one function.

Subcommands live one per module in this package and are imported only when used, so
``parallax --help`` and ``parallax check-env`` never import torch or JAX.
Every bad input ends as one line on stderr, ``parallax: error: ...``, with exit code 2 (on a
terminal, that line wrapped at its width).
"""

from __future__ import annotations

import importlib
import sys

import click

from parallax import __version__
from parallax.errors import ParallaxError, say
from parallax.store import files

# command name -> module defining ``command``
COMMANDS = {
    "check-env": "parallax.cli.check_env",
    "train": "parallax.cli.train",
    "parity": "parallax.cli.parity",
    "data": "parallax.cli.data",
    "benchmark": "parallax.cli.benchmark",
    "compare": "parallax.cli.compare",
    "crossover": "parallax.cli.crossover",
    "results": "parallax.cli.results",
    "export-configs": "parallax.cli.export_configs",
    "profile": "parallax.cli.profile",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name in COMMANDS if self._load(name) is not None]

    def get_command(self, ctx, name):
        if name in NOT_YET:
            raise click.UsageError(f"'parallax {name}' is not in this release yet; it arrives with {NOT_YET[name]}",
                                   ctx)
        return self._load(name)

    @staticmethod
    def _load(name):
        module = COMMANDS.get(name)
        if module is None:
            return None
        try:
            return importlib.import_module(module).command
        except ModuleNotFoundError as exc:
            if exc.name == module:  # the subcommand is not part of this build
                return None
            raise


# Commands of the spec that this release does not have yet (name -> what brings it), named in
# `parallax --help` and in the error for the name, so a reader of the spec does not guess.
NOT_YET: dict[str, str] = {}
NOT_YET_EPILOG = ("Not yet: " + "; ".join(f"'parallax {name}' (in the spec) arrives with {what}"
                                          for name, what in NOT_YET.items()) + ".") if NOT_YET else None


@click.group(cls=LazyGroup, invoke_without_command=True, epilog=NOT_YET_EPILOG,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="parallax")
@click.pass_context
def cli(ctx):
    """Benchmark low-precision LLM pre-training stacks (PyTorch, JAX) on NVIDIA GPUs."""
    if ctx.invoked_subcommand is None:  # bare `parallax`: the help, as --help gives it
        click.echo(ctx.get_help())


def fail(message: str, code: int = 2) -> int:
    """The error line on stderr (one line in a log, wrapped on a terminal: ``errors.say``); ``code``."""
    say(f"parallax: error: {message}")
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        result = cli.main(args=argv, prog_name="parallax", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else "parallax"
        return fail(f"{exc.format_message()} (see '{where} --help')")
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort as exc:
        stop = exc.__cause__  # Ctrl-C, or a signal of parallax.run.interrupt, before anything was kept
        code = getattr(stop, "exit_code", 130)
        return fail(f"interrupted by {stop.name}" if hasattr(stop, "name") else "aborted", code)
    except ParallaxError as exc:
        return fail(str(exc), exc.exit_code)
    except OSError as exc:  # a write that escaped the one writer (store/files.py): still one line
        if exc.errno not in files.WRITE_ERRNOS or exc.filename is None:
            raise
        return fail(str(files.refusal(exc.filename, exc)))
    return result if isinstance(result, int) else 0


def entry() -> None:
    code = main()
    if code > 128:  # stopped by a signal, its record written: end now, not through the interpreter's
        sys.stdout.flush()  # teardown, where a JAX compilation cut short can crash it (exit 139)
        sys.stderr.flush()
        import os

        os._exit(code)
    sys.exit(code)
