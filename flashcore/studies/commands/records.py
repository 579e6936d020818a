"""``records``: every record under results/ with its commit, date, device, kernel fingerprint and
whether today's kernel sources still match it; ``--summary`` writes results/SUMMARY.md from the
records, ``--check`` says whether the committed one is what they generate."""

from __future__ import annotations


def add_records_arguments(p) -> None:
    p.add_argument(
        "--summary",
        action="store_true",
        help="write results/SUMMARY.md (statuses and headline numbers) from the records",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when results/SUMMARY.md differs from what the records "
        "generate, printing the difference",
    )


def run_records(args) -> int:
    from .. import records

    rows = records.listing()
    print(records.format_listing(rows))
    partial = records.git_dependent(rows)
    if partial and (args.summary or args.check):
        print(
            f"\nthe status of {len(partial)} records needs the repository's history, which is "
            f"not here (no .git, or a shallow clone): {', '.join(partial)}"
        )
    if args.check:
        diff = records.summary_diff()
        if diff:
            print("\n" + "\n".join(diff))
            print(f"\n{records.summary_path()} is out of date: run {records.SUMMARY_COMMAND}")
            return 1
        print(f"\n{records.summary_path().name} is what the records generate")
    elif args.summary:
        if partial:
            print("not writing the summary here: it would lose those statuses")
            return 1
        path = records.write_summary()
        print(f"\nwrote {path.relative_to(path.parent.parent)}")
    return 0
