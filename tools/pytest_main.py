"""Main of the Bazel py_test targets: runs pytest on the test files given as arguments.

The project's pytest settings (pyproject.toml) apply; Bazel's XML_OUTPUT_FILE gets the JUnit report.
"""
import os
import sys

import pytest

if __name__ == "__main__":
    args = ["-q", *sys.argv[1:]]
    if "XML_OUTPUT_FILE" in os.environ:
        args.append(f"--junitxml={os.environ['XML_OUTPUT_FILE']}")
    sys.exit(pytest.main(args))
