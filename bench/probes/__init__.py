"""One-off measurements behind the results in bench/results (each module's docstring says how to run it)."""


def emit(text: str, out: str | None = None, mode: str = "w") -> None:
    """Print a probe's report, and write it to ``out`` too where given (``mode`` "a" appends)."""
    print(text)
    if out:
        with open(out, mode) as f:
            f.write(text + "\n")
