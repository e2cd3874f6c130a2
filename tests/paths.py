"""Where the tests find the repository's files, from any folder of the test tree."""

from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parent.parent
