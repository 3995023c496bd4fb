"""A tuning job's console redirect: Python's streams and the process's file descriptors 1 and 2 go
to the file while the block runs, and come back afterwards, also when the block raises."""
import os
import sys

import pytest

from tfpriv.tuning.console import console_to


def test_python_and_file_descriptor_output_go_to_the_file_and_come_back(tmp_path, capfd):
    path = tmp_path / "private" / "console.log"
    with pytest.raises(KeyboardInterrupt):
        with console_to(str(path)):
            print("trial 1 of 3")
            sys.stderr.write("epsilon: 1.5\n")
            os.write(1, b"C++ stdout\n")
            os.write(2, b"C++ stderr\n")
            raise KeyboardInterrupt
    print("released")
    os.write(2, b"after\n")
    shown = capfd.readouterr()
    assert (shown.out, shown.err) == ("released\n", "after\n")
    assert sorted(path.read_text().splitlines()) == ["C++ stderr", "C++ stdout", "epsilon: 1.5", "trial 1 of 3"]
