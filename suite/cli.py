"""`python -m suite COMMAND` / `benchsuite COMMAND`: devices, report, compare, health, plan, schema, ...

Each command lives in its own module with `add_arguments(parser)` and `run(args) -> int`; only the module of
the command being run is imported, so `report` and `compare` never import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from suite import __version__
from suite.cases import FAMILIES, family_read
from suite.errors import UserError
from suite.importers import READ_AS, read_as_choices

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "devices": ("suite.devices.command", "show what try_gpu()/try_all_gpus() return and the device inventory"),
    "report": ("suite.report.command", "build one self-contained HTML report from results files or folders"),
    "compare": ("suite.compare", "compare two results files or folders; exit 1 on a regression or a missing "
                "baseline benchmark or machine, 2 when nothing is compared"),
    "health": ("suite.health.command", "is each node as fast as it should be? exit 1 if one is flagged"),
    "schema": ("suite.config", "print the JSON Schema of the YAML config (for editors)"),
    "accuracy": ("suite.tools.accuracy", "the suite's figures against torch.utils.benchmark.Timer (and a plain "
                 "torch.distributed loop), paired in one run: one table of ratios"),
    "plan": ("suite.plan", "how many benchmarks a config selects per family and how long they take (--gpus N)"),
    "finish": ("suite.finish", "write the results JSON of a killed run from its RESULTS.partial.jsonl"),
}
# Commands that hand their remaining arguments to another program: one per family that runs under torchrun
# (its read module's TORCHRUN), through the torchrun launcher: name -> (module with main(argv) -> int, help).
# Commands that read results files, and so other tools' output: they take `--as NAME` (suite.importers.READ_AS).
READ_RESULTS = ("report", "compare", "health")
PASSTHROUGH: dict[str, tuple[str, str]] = {
    name: ("suite.distributed", f"run the {name} benchmarks on this node under torchrun (--nproc N, then "
           "pytest arguments)")
    for name in FAMILIES if family_read(name, "TORCHRUN")
}


def _build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m suite", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module_name).add_arguments(cmd)
        if name == selected and name in READ_RESULTS:
            cmd.add_argument("--as", dest="read_as", choices=read_as_choices(), metavar="NAME",
                             help="what another tool's output measured where it does not say (an nccl-tests log "
                             "that names no collective): e.g. --as all_gather")
    for name, (_, help_text) in PASSTHROUGH.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in argv if not a.startswith("-")), None)
    if selected in PASSTHROUGH and argv and argv[0] == selected:
        return int(importlib.import_module(PASSTHROUGH[selected][0]).main(argv[1:]) or 0)
    parser = _build_parser(selected if selected in COMMANDS else None)
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    token = READ_AS.set(getattr(args, "read_as", None))
    try:
        return int(module.run(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `| head` closed the pipe: what was wanted was read
        sys.stderr.close()  # nothing more can be said, and Python would say it at exit
        return 0
    except OSError as exc:  # an output that cannot be written: a full disk, /dev/full, a read-only mount
        where = f" {exc.filename}" if exc.filename else " the output"
        print(f"error: cannot write{where} ({exc.strerror or exc}); choose another path or free space",
              file=sys.stderr)
        return 2
    finally:
        READ_AS.reset(token)


if __name__ == "__main__":
    sys.exit(main())
