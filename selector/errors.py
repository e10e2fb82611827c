"""Selector errors, under crcr's tree.

    CrcrError
    ├── InputError
    │   └── SelectorInputError     a bad argument, inventory or plan file given to crcr select
    ├── ContractError
    │   └── PlanCheckError         ``crcr select check`` found problems (carries the findings)
    ├── ExternalError
    │   └── AgentError             the LLM answered badly or could not be reached
    └── ImportFailuresError        upstream files do not import on the installed torch (exit 1)
"""

from __future__ import annotations

from crcr.errors import ContractError, CrcrError, ExternalError, InputError


class SelectorInputError(InputError):
    reference = "select-bad-input"


class PlanCheckError(ContractError):
    reference = "plan-check-failed"


class AgentError(ExternalError):
    reference = "select-agent-failed"


class ImportFailuresError(CrcrError):
    reference = "import-failed"
    exit_code = 1


def import_failures(inventory: object, done: str) -> ImportFailuresError | None:
    """The error for an inventory's files that could not be imported (None when every file imported)."""
    errors = list(getattr(inventory, "errors", []) or [])
    if not errors:
        return None
    lines = [e.describe() for e in errors[:10]] + ([f"... and {len(errors) - 10} more"] if len(errors) > 10 else [])
    return ImportFailuresError(
        f"{done}, but {len(errors)} upstream file(s) do not import, so none of their tests is covered:\n  "
        + "\n  ".join(lines),
        hint="these files were written for another torch version: use the checkout matching the installed torch "
        "(or a compatibility shim in the checkout), or leave them out with --file",
    )
