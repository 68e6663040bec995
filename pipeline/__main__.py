"""Runs the `dpm` command as `python -m pipeline`."""

from pipeline.cli import main

if __name__ == "__main__":
    main()
