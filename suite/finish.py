"""`python -m suite finish RESULTS.partial.jsonl`: the results JSON of a run that died, from its journal."""

from __future__ import annotations

from pathlib import Path

from suite.errors import UserError
from suite.partial import SUFFIX, RunLock, read_partial, results_json, write_json_atomically


def add_arguments(parser) -> None:
    parser.add_argument("journal", metavar="RESULTS.partial.jsonl", help="the partial file a killed run left")
    parser.add_argument("-o", "--output", metavar="PATH", default=None,
                        help="the JSON to write (default: the run's own, RESULTS.json); an existing file is kept")


def run(args) -> int:
    """The journal's header and finished benchmarks as one results JSON, annotated as a run's end annotates it
    and still marked partial (report and compare say so: the run did not end). The journal stays, for
    --suite-resume."""
    from suite.cases.ceiling import annotate

    journal = Path(args.journal)
    if not journal.name.endswith(SUFFIX) or not journal.is_file():
        raise UserError(f"{journal}: no such partial results file (*{SUFFIX}); give the one a killed run left")
    output = Path(args.output or journal.with_name(journal.name.removesuffix(SUFFIX) + ".json"))
    if output.exists():
        raise UserError(f"{output} exists; give another path with -o, or delete it")
    lock = RunLock(journal)
    lock.acquire(output)  # refused while a run still writes the journal
    try:
        previous = read_partial(journal)
    finally:
        lock.release()
    if previous.header is None or not previous.benchmarks:
        raise UserError(f"{journal}: no readable header or no finished benchmark: nothing to write")
    doc = results_json(previous.header, list(previous.benchmarks.values()), previous.header.get("suite"),
                       partial=True)
    annotate(doc)
    write_json_atomically(output, doc)
    print(f"{output}: {len(previous.benchmarks)} finished benchmark(s) from {journal}")
    return 0
