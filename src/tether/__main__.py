"""``python -m tether``: the same command as ``tether``."""

from tether._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
