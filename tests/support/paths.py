"""The repository root, for tests that read the project's own files."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
