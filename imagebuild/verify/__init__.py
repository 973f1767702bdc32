"""`imagebuild verify`: check a built image against the pins, arch profile and constraints it was built from.

runner        one container, pytest-testinfra's checks (checks/) against it, then the layer scan
layers        credentials in every layer's files, deleted and hidden ones included, by layer and path
expectations  what the image must hold, from the inputs      result  CheckResult, VerifyResult, reports
checks_file   the project's own checks (checks.toml)       selection  -k and --list
check_session one pytest session over checks/ in a subprocess, for a run or a collection
launcher_cases the launcher dry runs of the recipe the arch's image carries
"""

from imagebuild.verify.expectations import Expectations, build_expectations
from imagebuild.verify.result import CheckResult, VerifyResult
from imagebuild.verify.runner import VerifyOptions, prepare_verify, verify

__all__ = [
    "CheckResult",
    "Expectations",
    "VerifyOptions",
    "VerifyResult",
    "build_expectations",
    "prepare_verify",
    "verify",
]
