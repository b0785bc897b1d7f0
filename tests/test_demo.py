"""`python -m dara_kernels.demo` (a README job) runs every method and prints its row."""
import dara_kernels as dk
from dara_kernels import demo


def test_demo_prints_every_method(capsys):
    demo.main(["--prompts", "16", "--group", "4", "--backend", "cpu" if dk.extension_available() else "reference"])
    printed = capsys.readouterr().out
    for method in dk.METHODS:
        assert any(line.startswith(method + " ") for line in printed.splitlines()), method
