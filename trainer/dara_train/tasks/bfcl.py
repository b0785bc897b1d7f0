"""BFCL v4 data and AST checker from the bfcl-eval package (installed
--no-deps). Its checker imports the package's model registry, which pulls in
every API client; where that import fails, a stub registry stands in (the
checker reads only `underscore_to_dot` from it)."""
from __future__ import annotations

import json
import sys
import types
from collections import defaultdict
from pathlib import Path


def _data_dir() -> Path:
    import bfcl_eval

    return Path(bfcl_eval.__file__).parent / "data"


def load_category(category: str) -> list[dict]:
    """Entries of BFCL_v4_<category>.json joined with their possible answers."""
    data = _data_dir()
    questions = [json.loads(line) for line in (data / f"BFCL_v4_{category}.json").read_text().splitlines() if line]
    answers_path = data / "possible_answer" / f"BFCL_v4_{category}.json"
    answers = {}
    if answers_path.exists():
        for line in answers_path.read_text().splitlines():
            if line:
                row = json.loads(line)
                answers[row["id"]] = row["ground_truth"]
    return [dict(q, ground_truth=answers.get(q["id"])) for q in questions if q["id"] in answers]


def _checker_module():
    try:
        from bfcl_eval.eval_checker.ast_eval import ast_checker as module
        return module
    except ImportError:
        stub = types.ModuleType("bfcl_eval.constants.model_config")
        stub.MODEL_CONFIG_MAPPING = defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
        sys.modules["bfcl_eval.constants.model_config"] = stub
        from bfcl_eval.eval_checker.ast_eval import ast_checker as module
        return module


def ast_check(entry: dict, calls: list[dict], category: str) -> bool:
    """BFCL's own verdict on calls [{"func": {"arg": value}}] for an entry."""
    from bfcl_eval.constants.enums import Language

    module = _checker_module()
    result = module.ast_checker(entry["function"], calls, entry["ground_truth"], Language.PYTHON, category,
                                "dara-kernels")
    return bool(result["valid"])
