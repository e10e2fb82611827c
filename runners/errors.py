"""Errors of the runners (subclasses of crcr's tree, so the CLI prints them without traceback).

    CrcrError
    ├── InputError                 (crcr) bad arguments or files: exit status 2
    └── RunnerError                a run could not be carried out: exit status 1
        ├── DeviceUnavailableError the device does not exist on this machine: exit status 3
        ├── CollectionError        pytest collected nothing it should have, or died collecting
        └── UnplannedError         --plan does not cover files the run would run (--unplanned error)
"""

from __future__ import annotations

from crcr.errors import CrcrError

# distinct from 1 (tests failed) and 2 (bad input): a CI job can tell "no GPU here"
EXIT_DEVICE_UNAVAILABLE = 3


class RunnerError(CrcrError):
    reference = "run-failed"
    exit_code = 1


class DeviceUnavailableError(RunnerError):
    reference = "device-unavailable"
    exit_code = EXIT_DEVICE_UNAVAILABLE


class CollectionError(RunnerError):
    reference = "collection-failed"


class UnplannedError(RunnerError):
    reference = "unplanned"
